"""hankweave: a durable runtime for long, multi-step LLM-agent work."""

__version__ = "0.1.0"
