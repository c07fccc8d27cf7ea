"""Measuring one configuration: RunConfig, runner (subprocess isolation), worker, timed step,
records and store, environment, metrics."""
