"""A scripted mock LLM provider speaking the Anthropic Messages and OpenAI Chat Completions
wire protocols on 127.0.0.1, so hanks and harnesses run offline with their real clients.

:mod:`~hankweave.mock_provider.script` is the script format, :mod:`.requests` how a request is
matched (:mod:`.actions`: how a neutral step becomes the client's own tool call),
:mod:`.wire` the two protocols, :mod:`.server` the aiohttp server.  Only the script
and request modules load at import; the server imports aiohttp when it starts.
"""
