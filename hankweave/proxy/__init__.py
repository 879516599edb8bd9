"""The LLM proxy: every agent request through one place, recorded and held to the budget
(docs/proxy.md).  aiohttp loads only when a proxy starts."""
