"""A test plugin: a one-call agent that talks to ``ANTHROPIC_BASE_URL`` over plain HTTP.

For ``hankweave run --mock-provider`` tests in the kernel's test environment, where no provider
client library is installed: the harness ``http-agent`` claims every model, sends the codon's
prompt as one Messages API request to the base URL and key it finds in the request's
environment (``CodonRequest.env``, as every harness must), and logs the reply and its usage.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator, Mapping
from typing import Any

from hankweave.codonlog import assistant_text, init_record, result_record
from hankweave.harness import AttemptContext, CodonRequest, Harness
from hankweave.hookspecs import hookimpl
from hankweave.state.types import TokenUsage


class HttpAgent(Harness):
    name = "http-agent"
    supports_resume = False

    async def run_codon(self, request: CodonRequest, context: AttemptContext
                        ) -> AsyncIterator[Any]:
        yield init_record(f"http-{request.codon_id}", cwd=request.work_dir,
                          model=request.model.model_id)
        reply = await asyncio.to_thread(_post, request.env, {
            "model": request.model.model_id, "max_tokens": 1024, "stream": False,
            "system": request.system_prompt or "",
            "messages": [{"role": "user", "content": request.prompt}]})
        usage = TokenUsage(input_tokens=reply["usage"]["input_tokens"],
                           output_tokens=reply["usage"]["output_tokens"])
        text = "".join(block.get("text", "") for block in reply["content"])
        yield assistant_text(text, model=request.model.model_id, usage=usage,
                             message_id=reply["id"])
        yield result_record(session_id=f"http-{request.codon_id}", text=text, usage=usage,
                            num_turns=1)


def _post(env: Mapping[str, str], body: dict[str, Any]) -> dict[str, Any]:
    http = urllib.request.Request(
        f"{env['ANTHROPIC_BASE_URL']}/v1/messages", data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "x-api-key": env["ANTHROPIC_API_KEY"]})
    with urllib.request.urlopen(http, timeout=10) as response:
        return json.loads(response.read())


@hookimpl
def register_harnesses(register: Any) -> None:
    register(HttpAgent)


@hookimpl
def select_harness(model: Any, provider: Any, harnesses: Mapping[str, Any]) -> str | None:
    return HttpAgent.name if HttpAgent.name in harnesses else None
