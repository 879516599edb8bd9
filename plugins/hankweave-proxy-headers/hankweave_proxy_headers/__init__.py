"""Configured headers on every agent request through hankweave's LLM proxy: the ``headers``
proxy middleware (README.md).  Credential headers are refused: they stay with the agent."""
