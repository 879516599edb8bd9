"""The agent loop: a model on litellm with the tools of :mod:`.tools`, one pass of a codon.

Imported only when a codon runs: litellm takes seconds to import, and it must not reach the
network (``LITELLM_LOCAL_MODEL_COST_MAP=True`` is set before the import, so it uses the price
map in its wheel).

A pass (``run_pass``) appends the codon's prompt to the session and loops: one streamed
``acompletion`` with the tools, its assistant message saved in the session and written to the
log, then every tool call of it run (in parallel) and their results saved and written, until
the model answers without calling a tool, the turn limit is reached, or the provider fails.
Records are the kernel's Claude-shaped codon-log records (``hankweave.api`` builders), with the
original's translation: pi's tool names become Claude's, tool inputs take Claude's spelling,
tool ids that are not ``toolu_...``/``call_<hex>`` get a ``toolu_`` id derived from the session,
the message and the provider's id (the same in every attempt that sees the call).

``ask_human`` is the kernel's own tool: its call is answered by ``AttemptContext.ask_human``,
without the tool policy (``authorize_tool``) every other call goes through.

Pending tool calls: the assistant message is saved before its tools run, so an attempt the
runtime cancels meanwhile (to wait for a human: an ``ask_human`` question, a call held for
approval) leaves a session that ends with calls without results (the results that did come in
are saved at the cancellation).  A pass with ``resumes_interruption`` on such a session runs
those calls again, each through ``ask_human`` / ``authorize_tool`` as usual (the kernel now has
the answer), and goes on without sending its prompt; on a session that owes nothing it sends
the prompt (it tells the agent the answers).  Any other pass closes such calls with an error
result ("not run") before its prompt, since a provider refuses calls left without results.

Context: when the last request's prompt used more than ``compactAt`` of the model's context,
or the provider said the context is exceeded, a codon with ``autoCompact`` has the older turns
summarised by the model (a ``compact_boundary`` record, trigger ``auto``) and goes on; without
it, a provider's context error ends the pass with that error (the kernel reads it as context
exceeded).

Reasoning effort: a codon on a variant spelling (``gpt-5.2-high``, ``pi/anthropic/...-xhigh``)
has each agent request ask for that effort with litellm's ``reasoning_effort``, which litellm
turns into each provider's own form (OpenAI's ``reasoning_effort``, Anthropic's thinking budget
or adaptive effort).  Anthropic's thinking blocks are kept in the session with their assistant
message, since the provider wants them back when the tool results of that turn are sent.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import secrets
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_LOG", "ERROR")

import litellm

from hankweave.api import (
    TURN_LIMIT_SUBTYPE,
    AttemptContext,
    CodonRequest,
    TokenUsage,
    assistant_record,
    compact_boundary_record,
    init_record,
    result_record,
    text_block,
    tool_result_record,
    tool_use_block,
)
from hankweave_harness_pi.providers import Route
from hankweave_harness_pi.sessions import Session, SessionStore
from hankweave_harness_pi.tools import (
    AGENT_TOOL_SPECS,
    ASK_HUMAN,
    CLAUDE_NAMES,
    Toolbox,
    ToolError,
    ToolOutcome,
    log_input,
    question_arguments,
)

if TYPE_CHECKING:
    from hankweave_harness_pi.harness import PiConfig

litellm.suppress_debug_info = True
logging.getLogger("LiteLLM").setLevel(logging.ERROR)
litellm.disable_hf_tokenizer_download = True
# No litellm callbacks are used: its per-chunk success logging is only cost (ms per turn).
litellm.disable_streaming_logging = True

log = logging.getLogger(__name__)

KEPT_TOOL_ID = re.compile(r"^(toolu_[A-Za-z0-9]+|call_[a-fA-F0-9]+)$")
SUMMARY_PROMPT = (
    "The conversation so far is too long to continue. Summarise it for yourself: the task, what"
    " you found, what you changed (files and how), what is left to do and anything you must"
    " not forget. Be complete but brief; this summary replaces the earlier turns.")
KEEP_AFTER_COMPACTION = 2
"""Recent messages kept verbatim after a compaction (the last exchange; the rest, but the
system prompt, become the summary)."""
NOT_RUN = ("Not run: the agent was stopped while this tool call was pending. Call it again if"
           " it is still needed.")
"""The result of a pending call that a pass other than an interruption's resume closes."""
LOGGED_TOOLS = [*CLAUDE_NAMES.values(), ASK_HUMAN]
"""The tools as the ``init`` record lists them (Claude's names, and ``ask_human``)."""


@dataclass
class PassTotals:
    """What one pass spent."""

    usage: TokenUsage = field(default_factory=TokenUsage)
    cost: float | None = 0.0
    turns: int = 0
    started: float = field(default_factory=time.monotonic)

    def add(self, usage: TokenUsage, cost: float | None) -> None:
        self.usage = self.usage + usage
        self.cost = None if cost is None or self.cost is None else self.cost + cost


class StreamedReply:
    """A streamed reply put back together, in the shape of litellm's ``ModelResponse`` as far
    as the loop reads it (``choices[0].message`` with ``content`` and ``tool_calls``,
    ``choices[0].finish_reason``, ``usage``): cheaper than ``stream_chunk_builder``."""

    def __init__(self) -> None:
        self.chunks: list[Any] = []
        self.text: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.thinking: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: Any = None

    def add(self, chunk: Any) -> None:
        self.chunks.append(chunk)
        usage: Any = getattr(chunk, "usage", None)
        if usage is not None and (usage.prompt_tokens or usage.completion_tokens):
            self.usage = usage
        for choice in getattr(chunk, "choices", None) or ():
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason
            delta = choice.delta
            if delta is None:
                continue
            if delta.content:
                self.text.append(delta.content)
            for block in getattr(delta, "thinking_blocks", None) or ():
                self._add_thinking(block)
            for call in getattr(delta, "tool_calls", None) or ():
                entry = self.calls.setdefault(call.index or 0, {"id": "", "name": "",
                                                                "arguments": []})
                if call.id:
                    entry["id"] = call.id
                function = call.function
                if function is not None:
                    if function.name:
                        entry["name"] = function.name
                    if function.arguments:
                        entry["arguments"].append(function.arguments)

    def _add_thinking(self, block: Any) -> None:
        """One streamed piece of an Anthropic thinking block: its text is appended, its
        signature (or a redacted block's data) kept."""
        piece = dict(block) if isinstance(block, Mapping) else {}
        index = piece.pop("index", len(self.thinking))
        entry = self.thinking.setdefault(index, {"type": piece.get("type", "thinking")})
        for key, value in piece.items():
            if key == "thinking":
                entry["thinking"] = entry.get("thinking", "") + (value or "")
            elif value:
                entry[key] = value

    @property
    def choices(self) -> list[Any]:
        calls = [_Call(c["id"], _Function(c["name"], "".join(c["arguments"])))
                 for _, c in sorted(self.calls.items())]
        thinking = [block for _, block in sorted(self.thinking.items())]
        message = _Message("".join(self.text) or None, calls or None, thinking or None)
        return [_Choice(message, self.finish_reason)]


@dataclass
class _Function:
    name: str
    arguments: str


@dataclass
class _Call:
    id: str
    function: _Function


@dataclass
class _Message:
    content: str | None
    tool_calls: list[_Call] | None
    thinking_blocks: list[dict[str, Any]] | None = None


@dataclass
class _Choice:
    message: _Message
    finish_reason: str | None


class ToolIds:
    """Tool call ids as the log shows them: the provider's when they have a known shape, else
    a ``toolu_`` id derived from the session the message was made in, the assistant message's
    index in it and the provider's id: the same for the call and its result, in the attempt
    that made the call and in the one that resumes it (on a copy of the session,
    :meth:`Session.origin_of`), and distinct for a provider that reuses ids across turns or
    across the copies of one session."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def __call__(self, provider_id: str, message_index: int) -> str:
        if KEPT_TOOL_ID.match(provider_id):
            return provider_id
        origin = self.session.origin_of(message_index)
        key = f"{origin}\0{message_index}\0{provider_id}".encode()
        return f"toolu_{hashlib.sha256(key).hexdigest()[:24]}"


def message_id() -> str:
    return f"msg_{int(time.time() * 1000):x}{secrets.token_hex(6)}"


class AgentPass:
    """One pass of one codon (see the module docstring)."""

    def __init__(self, request: CodonRequest, context: AttemptContext, config: PiConfig,
                 route: Route, sessions: SessionStore, session: Session, toolbox: Toolbox,
                 price: Any) -> None:
        self.request, self.context, self.config = request, context, config
        self.route, self.sessions, self.session, self.toolbox = route, sessions, session, toolbox
        self.price = price
        """``TokenUsage -> float | None``: the harness settings' price for the model, or None
        (the kernel then prices the usage from the catalogue)."""
        self.totals = PassTotals()
        self.tool_ids = ToolIds(session)
        self.context_limit = request.model.context_limit
        self.last_prompt_tokens = 0
        """The prompt size of the last request (input, cache reads and writes): what decides
        a compaction."""

    async def run(self) -> AsyncIterator[dict[str, Any]]:
        session = self.session
        yield init_record(session.id, cwd=str(self.request.work_dir),
                          tools=list(LOGGED_TOOLS), model=self.route.display,
                          api_key_source=self.route.key_variable or "none")
        at, pending = session.pending_tool_calls()
        if pending and self.request.resumes_interruption:
            # The run before ended waiting for a human while these calls were pending: run
            # them again (the kernel answers them at once now) and go on from their results.
            yield await self._run_tools(at, [_saved_call(call) for call in pending])
            self.sessions.save(session)
        else:
            if pending:
                yield self._close_pending(at, [_saved_call(call) for call in pending])
            session.messages.append({"role": "user", "content": self.request.prompt})
            self.sessions.save(session)
        last_text = ""
        while True:
            if self.totals.turns >= self.config.max_turns:
                yield self._result(error=f"Reached maximum number of turns"
                                         f" ({self.config.max_turns})", subtype=TURN_LIMIT_SUBTYPE)
                return
            try:
                async for record in self._compact_if_needed():
                    yield record
                response = await self._complete()
            except Exception as exc:  # litellm's provider errors, classified by the kernel
                if _context_exceeded(exc) and self.request.auto_compact:
                    async for record in self._compact(force=True):
                        yield record
                    continue
                yield self._result(error=describe_error(exc))
                return
            self.totals.turns += 1
            message = response.choices[0].message
            usage, cost = self._usage_and_cost(response)
            self.totals.add(usage, cost)
            calls = list(message.tool_calls or [])
            last_text = message.content or last_text
            at = len(session.messages)
            session.messages.append(_history_message(message, calls))
            # Saved before its tools run: an attempt cancelled meanwhile keeps the calls.
            self.sessions.save(session)
            yield self._assistant(message, calls, usage, response, at)
            if not calls:
                yield self._result(text=message.content or "")
                return
            yield await self._run_tools(at, calls)
            self.sessions.save(session)

    # -- the model --

    async def _complete(self) -> Any:
        route, config = self.route, self.config
        options: dict[str, Any] = {}
        if route.anthropic:
            # Prompt caching: the system prompt and the conversation so far.
            options["cache_control_injection_points"] = [
                {"location": "message", "role": "system"}, {"location": "message", "index": -1}]
        if config.max_tokens:
            options["max_tokens"] = config.max_tokens
        if config.temperature is not None:
            options["temperature"] = config.temperature
        effort = self.request.model.reasoning_effort
        if effort is not None:
            options["reasoning_effort"] = effort.value
        with self.context.busy():  # a slow first token is not an idle agent
            stream = await litellm.acompletion(
                model=route.model, messages=self.session.messages, tools=AGENT_TOOL_SPECS,
                stream=True, stream_options={"include_usage": True}, api_base=route.api_base,
                api_key=route.api_key or ("not-needed" if route.api_base else None),
                timeout=config.request_timeout_s, max_retries=0, **options)
            reply = StreamedReply()
            try:
                async for chunk in stream:
                    reply.add(chunk)
            finally:
                close = getattr(stream, "aclose", None)
                if close is not None:
                    await close()
        if reply.usage is None:  # a provider path that reports usage only in the whole reply
            return litellm.stream_chunk_builder(reply.chunks, messages=self.session.messages)
        return reply

    def _usage_and_cost(self, response: Any) -> tuple[TokenUsage, float | None]:
        raw = getattr(response, "usage", None)
        cached_read = int(getattr(raw, "cache_read_input_tokens", 0) or 0)
        if not cached_read:
            details = getattr(raw, "prompt_tokens_details", None)
            cached_read = int(getattr(details, "cached_tokens", 0) or 0)
        cache_write = int(getattr(raw, "cache_creation_input_tokens", 0) or 0)
        prompt = int(getattr(raw, "prompt_tokens", 0) or 0)
        usage = TokenUsage(input_tokens=max(0, prompt - cached_read - cache_write),
                           output_tokens=int(getattr(raw, "completion_tokens", 0) or 0),
                           cache_read_tokens=cached_read, cache_creation_tokens=cache_write)
        self.last_prompt_tokens = prompt
        return usage, self.price(usage) if self.price is not None else None

    # -- records --

    def _assistant(self, message: Any, calls: list[Any], usage: TokenUsage,
                   response: Any, at: int) -> dict[str, Any]:
        """The log record of the assistant message at index ``at`` of the session."""
        blocks = []
        if message.content:
            blocks.append(text_block(message.content))
        for call in calls:
            blocks.append(tool_use_block(
                CLAUDE_NAMES.get(call.function.name, call.function.name),
                log_input(_arguments(call)), tool_use_id=self.tool_ids(call.id or "", at)))
        finish = response.choices[0].finish_reason
        stop = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}.get(
            finish or "")
        return assistant_record(blocks, model=self.route.display, usage=usage,
                                message_id=message_id(), stop_reason=stop)

    async def _run_tools(self, at: int, calls: list[Any]) -> dict[str, Any]:
        """Run ``calls`` (of the session's assistant message at index ``at``) in parallel, add
        their results to the session, and give the log record of the results.

        Cancelled midway (the runtime stops the attempt, to wait for a human among others),
        the results that came in are saved before the cancellation goes on: those calls are
        done, and only the others are pending for a resume.
        """
        outcomes: dict[int, ToolOutcome] = {}

        async def run(index: int, call: Any) -> None:
            outcomes[index] = await self._run_tool(call)

        try:
            with self.context.busy():
                await asyncio.gather(*(run(index, call) for index, call in enumerate(calls)))
        except BaseException:
            self._keep_results(at, calls, outcomes)
            raise
        return self._add_results(at, calls, [outcomes[index] for index in range(len(calls))])

    def _keep_results(self, at: int, calls: list[Any], outcomes: dict[int, ToolOutcome]
                      ) -> None:
        if not outcomes:
            return  # the saved session already holds the calls, all pending
        self._add_results(at, [calls[index] for index in sorted(outcomes)],
                          [outcomes[index] for index in sorted(outcomes)])
        try:
            self.sessions.save(self.session)
        except OSError as exc:  # the cancellation (or the tool's failure) is what propagates
            log.warning("pi session %s: could not save the results that came in: %s",
                        self.session.id, exc)

    def _add_results(self, at: int, calls: list[Any], outcomes: list[ToolOutcome]
                     ) -> dict[str, Any]:
        self.session.add_tool_results(at, [(call.id, outcome.text)
                                           for call, outcome in zip(calls, outcomes, strict=True)])
        return tool_result_record_many([(self.tool_ids(call.id or "", at), outcome)
                                        for call, outcome in zip(calls, outcomes, strict=True)])

    def _close_pending(self, at: int, calls: list[Any]) -> dict[str, Any]:
        """Answer calls an earlier attempt left pending with :data:`NOT_RUN` (a provider
        refuses a conversation with calls left without results)."""
        return self._add_results(at, calls, [ToolOutcome(NOT_RUN, is_error=True)] * len(calls))

    async def _run_tool(self, call: Any) -> ToolOutcome:
        name = call.function.name
        arguments = _arguments(call)
        if name == ASK_HUMAN:
            return await self._ask_human(arguments)
        decision = await self.context.authorize_tool(CLAUDE_NAMES.get(name, name),
                                                      log_input(arguments))
        if not decision.allowed:
            return ToolOutcome(decision.message or f"{name} is not allowed", is_error=True)
        if decision.updated_input is not None:
            arguments = dict(decision.updated_input)
        return await self.toolbox.run(name, arguments)

    async def _ask_human(self, arguments: Mapping[str, Any]) -> ToolOutcome:
        """The kernel's own tool, so no ``authorize_tool``: the human's answer, or what the
        kernel says instead (an error result) when no human can answer."""
        try:
            question, options = question_arguments(arguments)
        except ToolError as error:
            return ToolOutcome(str(error), is_error=True)
        reply = await self.context.ask_human(question, options or None)
        if reply.answer is not None:
            return ToolOutcome(reply.answer)
        return ToolOutcome(reply.message or "No human answered the question.", is_error=True)

    def _result(self, *, text: str = "", error: str | None = None,
                subtype: str | None = None) -> dict[str, Any]:
        totals = self.totals
        record = result_record(
            session_id=self.session.id, success=error is None,
            text=error if error is not None else text, usage=totals.usage,
            total_cost_usd=totals.cost if self.price is not None else None,
            num_turns=totals.turns, subtype=subtype)
        record["duration_ms"] = int((time.monotonic() - totals.started) * 1000)
        return record

    # -- context --

    async def _compact_if_needed(self) -> AsyncIterator[dict[str, Any]]:
        prompt = self.last_prompt_tokens
        if self.request.auto_compact and prompt > self.config.compact_at * self.context_limit:
            async for record in self._compact():
                yield record

    async def _compact(self, *, force: bool = False) -> AsyncIterator[dict[str, Any]]:
        messages = self.session.messages
        keep = _tail_start(messages, KEEP_AFTER_COMPACTION)
        if keep <= 2 and not force:
            return
        before = self.last_prompt_tokens
        summary_request = [*messages[:keep], {"role": "user", "content": SUMMARY_PROMPT}]
        with self.context.busy():
            response = await litellm.acompletion(
                model=self.route.model, messages=summary_request, api_base=self.route.api_base,
                api_key=self.route.api_key or ("not-needed" if self.route.api_base else None),
                timeout=self.config.request_timeout_s, max_retries=0)
        usage, cost = self._usage_and_cost(response)
        self.totals.add(usage, cost)
        summary = response.choices[0].message.content or ""
        self.session.messages = [
            messages[0],
            {"role": "user", "content": f"[Summary of the earlier conversation]\n{summary}"},
            {"role": "assistant", "content": "Understood; continuing from the summary."},
            *messages[keep:]]
        self.session.rewritten()
        self.sessions.save(self.session)
        self.last_prompt_tokens = 0
        yield compact_boundary_record(self.session.id, trigger="auto", pre_tokens=before)


def tool_result_record_many(results: list[tuple[str, Any]]) -> dict[str, Any]:
    """One ``user`` record carrying every tool result of a turn, as the original wrote it."""
    blocks = []
    for tool_id, outcome in results:
        record = tool_result_record(tool_id, outcome.text or "(ok)", is_error=outcome.is_error)
        blocks.extend(record["message"]["content"])
    return {"type": "user", "message": {"role": "user", "content": blocks}}


def _arguments(call: Any) -> dict[str, Any]:
    raw = call.function.arguments or "{}"
    try:
        value = json.loads(raw) if isinstance(raw, str) else dict(raw)
    except ValueError:
        return {"_unparsed": raw}
    return value if isinstance(value, dict) else {"_unparsed": raw}


def _saved_call(call: Mapping[str, Any]) -> _Call:
    """A tool call of a saved assistant message, in the shape of a streamed one."""
    function = call.get("function")
    if not isinstance(function, dict):
        function = {}
    return _Call(str(call.get("id") or ""), _Function(str(function.get("name") or ""),
                                                      str(function.get("arguments") or "{}")))


def _history_message(message: Any, calls: list[Any]) -> dict[str, Any]:
    entry: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
    thinking = getattr(message, "thinking_blocks", None)
    if thinking:
        entry["thinking_blocks"] = [dict(block) for block in thinking]
    if calls:
        entry["tool_calls"] = [{"id": call.id, "type": "function", "function": {
            "name": call.function.name, "arguments": call.function.arguments or "{}"}}
            for call in calls]
    return entry


def _tail_start(messages: list[dict[str, Any]], keep: int) -> int:
    """Where the kept tail begins: about ``keep`` messages from the end, never inside a tool
    exchange (a tool result needs its call)."""
    start = max(1, len(messages) - keep)
    while start < len(messages) and messages[start].get("role") == "tool":
        start -= 1
    return max(1, start)


def _context_exceeded(exc: BaseException) -> bool:
    return isinstance(exc, litellm.ContextWindowExceededError)


def describe_error(exc: BaseException) -> str:
    """A provider error as the kernel's classifier reads it: the status code, the provider's
    words, a retry-after hint and the context-overflow wording where they apply."""
    status = getattr(exc, "status_code", None)
    headers: Mapping[str, str] = getattr(exc, "litellm_response_headers", None) or {}
    retry_after = headers.get("retry-after") if hasattr(headers, "get") else None
    text = str(getattr(exc, "message", "") or exc)
    text = re.sub(r"^litellm\.\w+:\s*", "", text)
    parts = [f"API Error: {status}" if status else "API Error:", text]
    if isinstance(exc, litellm.ContextWindowExceededError):
        parts.append("(context_length_exceeded: prompt is too long)")
    if isinstance(exc, litellm.RateLimitError):
        parts.append("(rate limit)")
    if retry_after:
        parts.append(f"retry-after: {retry_after}")
    return " ".join(part for part in parts if part)


async def run_pass(request: CodonRequest, context: AttemptContext, config: PiConfig,
                   route: Route, sessions: SessionStore, session: Session, toolbox: Toolbox,
                   price: Any) -> AsyncIterator[dict[str, Any]]:
    agent = AgentPass(request, context, config, route, sessions, session, toolbox, price)
    async for record in agent.run():
        yield record


__all__ = ["AgentPass", "StreamedReply", "describe_error", "run_pass"]
