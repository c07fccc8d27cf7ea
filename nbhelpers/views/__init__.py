"""Views: tables, plots, widgets and the HTML report."""
