"""What to send: the run config, datasets, token lengths and arrival times."""
