"""Sending it: the runner, its worker processes, the per-request client, the transports and the SSE parser."""
