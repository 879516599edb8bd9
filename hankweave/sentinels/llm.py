"""The built-in sentinel kind: render the prompts, ask the model through litellm, check the answer.

What the original's ``Sentinel`` class does per trigger (docs/sentinels.md, "The LLM call"):

* the prompts are read once at load (files joined with blank lines, then the text) and compiled
  as templates, so a syntax error is a load failure, not a surprise at the first trigger;
* each trigger renders them with the trigger's events, the codon and ``world.currentTime``;
* the call goes through ``litellm.acompletion`` with the sentinel's temperature, output limit
  and retries; the route and key come from :func:`hankweave.providers.sentinel_route`
  (``HANKWEAVE_SENTINEL_<PROVIDER>_API_KEY``, then the provider's usual variable; the mock
  provider under ``run --mock-provider``);
* a ``structuredOutput`` answer is requested as JSON (``response_format``) and validated
  against the JSON Schema of its Zod source; an array or enum answer travels wrapped in an
  object (``elements`` / ``result``), because providers want an object at the root;
* a conversational sentinel sends its pruned history and records each turn.

litellm is imported at the first call, off the event loop (it takes seconds), and jsonschema at
the first structured answer; ``validate`` imports neither.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hankweave.sentinel import (
    SentinelAnswer,
    SentinelDefinition,
    SentinelError,
    SentinelFatalError,
    SentinelFiring,
    SentinelKind,
    SentinelSetup,
)
from hankweave.sentinels.config import DEFAULT_KIND, SentinelConfig
from hankweave.sentinels.structured_output import (
    StructuredOutputSchemaError,
    structured_output_schema,
)
from hankweave.sentinels.templates import (
    PromptTemplate,
    PromptTemplateError,
    TemplateRenderError,
    sentinel_prompt_context,
)

if TYPE_CHECKING:
    from hankweave.sentinels.history import ConversationHistory

JsonSchema = dict[str, Any]

CALL_TIMEOUT_S = 300.0
"""How long one LLM call (each of its retries) may take: a provider that hangs fails the
trigger instead of holding the codon's completion drain."""

_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*)\n\s*```\s*$", re.DOTALL)


def read_prompt(files: str | list[str] | None, text: str | None, directory: Path) -> str | None:
    """A prompt as the original assembles it: the files' contents joined with blank lines, then
    the text; None when neither is given.  Raises :class:`OSError` naming an unreadable file."""
    names = [files] if isinstance(files, str) else list(files or ())
    parts = []
    for name in names:
        try:
            parts.append((directory / name).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise OSError(f"cannot read prompt file {name!r}: {exc}") from None
    if text:
        parts.append(text)
    return "\n\n".join(parts) if parts else None


class PreparedPrompts:
    """A config's prompts compiled and its answer schema translated, once per load."""

    def __init__(self, config: SentinelConfig, directory: Path) -> None:
        system = read_prompt(config.system_prompt_file, config.system_prompt_text, directory)
        user = read_prompt(config.user_prompt_file, config.user_prompt_text, directory)
        self.system = (_compiled(system, "system prompt (systemPromptFile/systemPromptText)")
                       if system is not None else None)
        self.user = _compiled(user or "", "user prompt (userPromptFile/userPromptText)")
        structured = config.structured_output
        self.mode = structured.output if structured else None
        self.schema: JsonSchema | None = None
        if structured is not None:
            try:
                self.schema = structured_output_schema(structured.model_dump(by_alias=True),
                                                       directory)
            except StructuredOutputSchemaError as exc:
                raise StructuredOutputSchemaError(f"structuredOutput: {exc}") from None


def _compiled(source: str, what: str) -> PromptTemplate:
    """The prompt's template; a syntax error names which prompt it is in."""
    try:
        return PromptTemplate.compile(source)
    except PromptTemplateError as exc:
        raise ValueError(f"{what}: {exc}") from None


class LlmSentinel(SentinelKind):
    """A sentinel that asks a model (the default ``kind``)."""

    name = DEFAULT_KIND

    @classmethod
    def check(cls, config: SentinelDefinition, directory: Path) -> None:
        """Raise :class:`ValueError` when the config cannot run: an unreadable prompt file, a
        template that does not compile, a schema outside the supported Zod subset."""
        try:
            PreparedPrompts(_llm_config(config), directory)
        except (OSError, PromptTemplateError, StructuredOutputSchemaError) as exc:
            raise ValueError(str(exc)) from None

    def __init__(self, setup: SentinelSetup) -> None:
        super().__init__(setup)
        from hankweave.models import split_effort
        from hankweave.providers import CredentialsError, sentinel_route

        config = self.config = _llm_config(setup.config)
        try:
            self.prompts = PreparedPrompts(config, setup.config_directory)
            # A variant spelling (``openai/gpt-5-high``) routes to its model, at its effort.
            self.effort = getattr(setup.model_entry, "reasoning_effort", None)
            model = split_effort(config.model or "")[0] if self.effort else config.model
            self.route = sentinel_route(model or "", setup.env)
        except (OSError, PromptTemplateError, StructuredOutputSchemaError,
                CredentialsError, ValueError) as exc:
            raise SentinelFatalError(str(exc), "configuration") from None
        self.params = config.resolved_llm_params
        self.history = self._history()
        _check_litellm()
        self._litellm: Any = None

    def _history(self) -> ConversationHistory | None:
        conversational = self.config.conversational
        if conversational is None:
            return None
        from hankweave.sentinels.history import ConversationHistory, history_path

        path = history_path(self.setup.state_dir / "history", self.setup.sentinel_id,
                            self.setup.codon_id)
        return ConversationHistory(path, conversational.trimming_strategy)

    # ----- one trigger -----

    async def fire(self, firing: SentinelFiring) -> SentinelAnswer:
        system, user = self._render(firing)
        messages: list[dict[str, Any]] = []
        if system is not None:
            messages.append({"role": "system", "content": system})
        messages += self._history_messages()
        messages.append({"role": "user", "content": user})
        response = await self._call(messages)
        text, tokens_in, tokens_out = _answer_of(response)
        cost = self._cost(response, tokens_in, tokens_out)
        try:
            content = self._parsed(text) if self.prompts.mode else text
        except SentinelError as exc:
            exc.cost = cost  # an answer that does not fit was paid for all the same
            raise
        if self.history is not None:
            self._record_turn(user, content, tokens_in, tokens_out)
        return SentinelAnswer(
            content=content, structured=self.prompts.mode is not None,
            cost=cost, input_tokens=tokens_in,
            output_tokens=tokens_out, llm_call=True)

    def _render(self, firing: SentinelFiring) -> tuple[str | None, str]:
        setup = self.setup
        context = sentinel_prompt_context(
            events=firing.events, current_time=firing.queued_at,
            codon={"id": setup.codon_id, "name": setup.name,
                   "description": setup.description, "startTime": setup.codon_start_time})
        try:
            system = self.prompts.system.render(context) if self.prompts.system else None
            return system, self.prompts.user.render(context)
        except TemplateRenderError as exc:
            raise SentinelError(str(exc), error_type="template-render-failed",
                                retriable=False) from None

    def _history_messages(self) -> list[dict[str, Any]]:
        if self.history is None:
            return []
        if not self.history.loaded and self.history.load() is not None:
            corruption = self.history.corruption
            raise SentinelFatalError(f"conversation history was corrupt and was cleared:"
                                     f" {corruption}", "corruption")
        return self.history.messages_for_call()

    def _record_turn(self, user: str, content: Any, tokens_in: int, tokens_out: int) -> None:
        assert self.history is not None
        try:
            self.history.record_turn(user, content, tokens_in or None, tokens_out or None)
        except OSError as exc:
            raise SentinelFatalError(f"cannot save the conversation history: {exc}",
                                     "resource", error_type="file-write-failed") from None

    async def _call(self, messages: list[dict[str, Any]]) -> Any:
        route, params = self.route, self.params
        options: dict[str, Any] = dict(params.provider_options.get(route.provider, {}))
        if self.effort is not None:
            options.setdefault("reasoning_effort", self.effort.value)
        if self.prompts.schema is not None:
            options["response_format"] = {"type": "json_schema", "json_schema": {
                "name": _schema_name(self.config), "schema": _wire_schema(
                    self.prompts.mode, self.prompts.schema)}}
            description = self.config.structured_output and \
                self.config.structured_output.schema_description
            if description:
                options["response_format"]["json_schema"]["description"] = description
        if self._litellm is None:
            # Off the loop: the import takes seconds, and the runtime (the codon's events, the
            # other sentinels, the clients) must not stop for them.  One thread of its own, so
            # the sentinels waiting for it do not fill the loop's default executor.
            self._litellm = await asyncio.get_running_loop().run_in_executor(
                _IMPORTER, _import_litellm)
        try:
            return await self._litellm.acompletion(
                model=route.model, messages=messages, api_base=route.api_base,
                api_key=route.api_key, temperature=params.temperature,
                max_tokens=params.max_output_tokens, num_retries=params.max_retries,
                timeout=CALL_TIMEOUT_S, drop_params=True, **options)
        except Exception as exc:  # litellm maps every provider failure to its own classes
            raise SentinelError(f"LLM call to {route.display} failed: {type(exc).__name__}:"
                                f" {exc}", llm_call=True,
                                retriable=_retriable(exc)) from None

    def _parsed(self, text: str) -> Any:
        """The structured answer: JSON, unwrapped, valid against the schema."""
        match = _FENCE.match(text)
        try:
            value = json.loads(match.group(1) if match else text)
        except json.JSONDecodeError as exc:
            raise SentinelError(f"the model's answer is not JSON ({exc.msg} at"
                                f" {exc.lineno}:{exc.colno}): {text[:200]!r}",
                                llm_call=True) from None
        value = _unwrapped(self.prompts.mode, value)
        assert self.prompts.schema is not None
        problem = _schema_problem(value, self.prompts.schema)
        if problem is not None:
            raise SentinelError(f"the model's answer does not match the schema: {problem}",
                                llm_call=True)
        return value

    def _cost(self, response: Any, tokens_in: int, tokens_out: int) -> float:
        """The call's price from the model catalogue (input and output tokens, as the
        original; cache tokens ignored), else litellm's own estimate, else 0."""
        entry = self.setup.model_entry
        cost = entry.cost if entry is not None else None
        if cost is not None:
            return (tokens_in * cost.input + tokens_out * cost.output) / 1_000_000
        hidden = getattr(response, "_hidden_params", None) or {}
        estimate = hidden.get("response_cost") if isinstance(hidden, Mapping) else None
        return float(estimate) if isinstance(estimate, int | float) else 0.0


_NO_LITELLM = "LLM sentinels need litellm: pip install 'hankweave[sentinels]'"
_IMPORTER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hankweave-litellm-import")
"""Where litellm is imported (its thread starts at the first import, and idles after it)."""


def _check_litellm() -> None:
    """Fail the load, not the first trigger, when litellm is missing (without importing it:
    that takes a second, and a codon's sentinels may never fire)."""
    import importlib.util

    if importlib.util.find_spec("litellm") is None:
        raise SentinelFatalError(_NO_LITELLM, "configuration")


def _llm_config(config: SentinelDefinition) -> SentinelConfig:
    """The kernel's config model, which the LLM kind reads its prompts and parameters from."""
    if not isinstance(config, SentinelConfig):
        raise TypeError(f"the llm sentinel kind needs a SentinelConfig, not {config!r}")
    return config


def _import_litellm() -> Any:
    try:
        import litellm
    except ImportError:
        raise SentinelFatalError(_NO_LITELLM, "configuration") from None
    litellm.telemetry = False
    litellm.suppress_debug_info = True
    return litellm


def _answer_of(response: Any) -> tuple[str, int, int]:
    try:
        text = response.choices[0].message.content
    except (AttributeError, IndexError, TypeError):
        text = None
    if not isinstance(text, str):
        raise SentinelError("the model returned no text", llm_call=True)
    usage = getattr(response, "usage", None)
    return (text, int(getattr(usage, "prompt_tokens", 0) or 0),
            int(getattr(usage, "completion_tokens", 0) or 0))


def _schema_name(config: SentinelConfig) -> str:
    given = config.structured_output.schema_name if config.structured_output else None
    return re.sub(r"[^A-Za-z0-9_-]", "_", given or config.id)[:64]


def _wire_schema(mode: str | None, schema: JsonSchema) -> JsonSchema:
    """The schema as requested: arrays and enums wrapped in an object, as the AI SDK sends them."""
    if mode == "object":
        return schema
    key = "elements" if mode == "array" else "result"
    inner = dict(schema)
    wrapped: JsonSchema = {name: inner.pop(name) for name in ("$schema", "$defs", "definitions")
                           if name in inner}
    wrapped.update(type="object", properties={key: inner}, required=[key],
                   additionalProperties=False)
    return wrapped


def _unwrapped(mode: str | None, value: Any) -> Any:
    key = {"array": "elements", "enum": "result"}.get(mode or "")
    if key is not None and isinstance(value, dict) and set(value) == {key}:
        return value[key]
    return value


def _schema_problem(value: Any, schema: JsonSchema) -> str | None:
    import jsonschema  # type: ignore[import-untyped]  # no stubs; installed with litellm

    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(value))
    if not errors:
        return None
    first = errors[0]
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}"
                    for part in first.absolute_path) or "(the answer)"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where.lstrip('.')}: {first.message}{more}"


def _retriable(exc: Exception) -> bool:
    """Rate limits, timeouts and server errors are worth another trigger; a bad request or a
    refused key is not."""
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status == 429 or status >= 500
    return type(exc).__name__ in ("Timeout", "APIConnectionError", "ServiceUnavailableError",
                                  "RateLimitError", "InternalServerError")
