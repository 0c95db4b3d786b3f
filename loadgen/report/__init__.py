"""What is shown: the results JSON and the terminal table."""
