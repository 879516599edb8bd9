"""``ask_human``: the agent's questions to a person, as an in-process MCP tool.

The Claude Agent SDK serves the tool from the harness's own process
(``create_sdk_mcp_server``): the CLI learns of the server from ``--mcp-config``
(``{"mcpServers": {"hankweave": {"type": "sdk", "name": "hankweave"}}}``, written by
:meth:`~hankweave_harness_claude.cli.PassPlan.command`) and sends its MCP traffic as
``mcp_message`` control requests, which the SDK's ``Query`` hands to the server.  The model
sees the tool as ``mcp__hankweave__ask_human``; its call is answered by
:meth:`AttemptContext.ask_human <hankweave.api.AttemptContext.ask_human>`, never authorized
through ``authorize_tool`` (it is the kernel's own tool).

The names and the schema are light (the harness puts them on the command line before the SDK
is imported); :func:`ask_human_server` imports the SDK.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from claude_agent_sdk import McpSdkServerConfig

    from hankweave.api import AttemptContext

MCP_SERVER = "hankweave"
"""The in-process MCP server's name, and its key in the CLI's ``--mcp-config``."""
ASK_HUMAN = "ask_human"
ASK_HUMAN_TOOL = f"mcp__{MCP_SERVER}__{ASK_HUMAN}"
"""The tool's name as the model and the CLI's permission rules see it."""

HUMAN_WAIT_S = 7 * 24 * 3600
"""How long the CLI waits for the harness's answer to a tool call: to the ``ask_human`` call
(``MCP_TOOL_TIMEOUT``, by default 1e8 ms, about 28 hours) and to the ``PreToolUse`` hook that
asks the kernel's tool policy (the SDK's default is 60 s).  With ``--wait-for-answers`` the
runtime holds either until a person answers, which may take days; the kernel's own deadlines
(an interruption's ``deadlineSeconds``) decide when to stop waiting, not the CLI."""

ASK_HUMAN_DESCRIPTION = (
    "Ask a human a question and wait for the answer. Use it only when you cannot go on "
    "without a decision or a fact that only a person can give; decide everything else "
    "yourself. Give `options` when the answer must be one of a few choices. When no human "
    "is available the result says so: then continue on your own judgement.")

ASK_HUMAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "question": {"type": "string",
                     "description": "The question, complete enough to be answered without "
                                    "seeing the conversation."},
        "options": {"type": "array", "items": {"type": "string"},
                    "description": "The allowed answers, when the answer must be one of "
                                   "them; leave out for a free answer."},
    },
    "required": ["question"],
}
"""A whole JSON schema (the SDK's ``{"name": type}`` shorthand makes every field required)."""


async def answer(context: AttemptContext, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The tool's result for a call with ``arguments`` (validated against
    :data:`ASK_HUMAN_SCHEMA` by the SDK): the human's answer, or what the kernel says instead,
    as an error result, when no human can answer."""
    options = [str(option) for option in arguments.get("options") or ()]
    reply = await context.ask_human(str(arguments["question"]), options or None)
    if reply.answer is not None:
        return {"content": [{"type": "text", "text": reply.answer}]}
    return {"content": [{"type": "text", "text": reply.message
                         or "No human answered the question."}], "is_error": True}


def ask_human_server(context: AttemptContext) -> McpSdkServerConfig:
    """The in-process MCP server that offers ``ask_human`` to the agent of ``context``."""
    from claude_agent_sdk import create_sdk_mcp_server, tool

    @tool(ASK_HUMAN, ASK_HUMAN_DESCRIPTION, ASK_HUMAN_SCHEMA)
    async def ask_human(arguments: dict[str, Any]) -> dict[str, Any]:
        return await answer(context, arguments)

    return create_sdk_mcp_server(MCP_SERVER, tools=[ask_human])
