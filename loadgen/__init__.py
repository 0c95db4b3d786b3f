"""loadgen: an httpx load generator for OpenAI-compatible servers that checks its own health."""

__version__ = "0.1.0"
