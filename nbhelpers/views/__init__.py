"""Views: plots, widgets and the HTML report (numbers come from ``analysis``, text from ``formatting``)."""
