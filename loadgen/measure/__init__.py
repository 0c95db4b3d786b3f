"""What was seen: per-request records and the statistics over them."""
