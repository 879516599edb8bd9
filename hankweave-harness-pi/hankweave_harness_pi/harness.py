"""``PiHarness``: codons on every non-Anthropic model (and Anthropic ones spelled ``pi/...``),
run by a pi-style coding agent on litellm.

This module is what the plugin registers, so it stays light: litellm (seconds to import) is
imported by :mod:`.agent` when a codon runs, never by ``hankweave --help``, ``validate`` or
``inspect``.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, field_validator

from hankweave.api import (
    AttemptContext,
    CodonLogRecord,
    CodonRequest,
    Harness,
    HarnessConfig,
    PreflightProblem,
    PreflightRequest,
)
from hankweave_harness_pi.providers import (
    PROXY_URL_ENV,
    CredentialsError,
    ProviderOptions,
    Route,
    route,
)
from hankweave_harness_pi.sessions import SessionNotFoundError, SessionStore

if TYPE_CHECKING:  # the state types load pydantic models: not at `hankweave validate` time
    from hankweave.api import TokenUsage

AGENT_MODULE = "hankweave_harness_pi.agent"
DATA_LINK = "read_only_data_source"
"""The workspace's link to the hank's read-only data (hankweave.api.DATA_LINK)."""

SYSTEM_PROMPT = (
    "You are a coding agent working in a sandboxed workspace, the current directory. Use the"
    " tools to read, search, edit and write files and to run shell commands there; paths are"
    " relative to the workspace. Work step by step until the task is done, then answer with a"
    " short summary of what you did.")


class ProviderSettings(HarnessConfig):
    """``harnesses.pi.providers.<id>``: where one provider is reached."""

    api_base: str | None = None
    """The endpoint (a local vLLM, Ollama or LM Studio server: ``http://127.0.0.1:8000/v1``)."""
    api_key_env: str | None = None
    """The variable holding its key (default: the provider's usual one)."""
    protocol: Literal["openai", "anthropic", "native"] | None = None
    """``openai`` for an OpenAI-compatible server, ``anthropic`` for an Anthropic-compatible
    one; default: the provider's own (litellm's route)."""


class ModelSettings(HarnessConfig):
    """``harnesses.pi.models."<provider>/<model>"``: a model the catalogue has no price for."""

    input: float = Field(ge=0)
    """USD per million input tokens."""
    output: float = Field(ge=0)
    """USD per million output tokens."""
    cache_read: float | None = Field(default=None, ge=0)
    cache_write: float | None = Field(default=None, ge=0)
    context_limit: int | None = Field(default=None, gt=0)
    """Its context window in tokens (for compaction)."""


class PiConfig(HarnessConfig):
    """The ``harnesses.pi`` settings."""

    max_turns: int = Field(default=200, gt=0)
    """End a pass after this many model turns (an error result)."""
    bash_timeout_s: float = Field(default=120.0, gt=0, le=600)
    """The default timeout of one bash command (the model may ask for up to 600 s)."""
    max_output_chars: int = Field(default=30_000, gt=1000)
    """A tool's output is cut to this many characters (head and tail kept)."""
    request_timeout_s: float = Field(default=600.0, gt=0)
    """One model request's timeout."""
    max_tokens: int | None = Field(default=None, gt=0)
    """The output cap of one model request (default: the provider's)."""
    temperature: float | None = Field(default=None, ge=0, le=2)
    compact_at: float = Field(default=0.85, gt=0, le=1)
    """With ``autoCompact``: compact when a request's prompt used this share of the context."""
    sessions_dir: str | None = None
    """Where sessions are kept (an absolute path; default: the execution's
    ``.hankweave/harnesses/pi/sessions/``)."""
    providers: dict[str, ProviderSettings] = Field(default_factory=dict)
    models: dict[str, ModelSettings] = Field(default_factory=dict)

    @field_validator("sessions_dir")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not os.path.isabs(os.path.expanduser(value)):
            raise ValueError(f"{value!r} is not an absolute path")
        return value


class PiHarness(Harness):
    """Runs codons with the pi-style agent on litellm."""

    name: ClassVar[str] = "pi"
    package: ClassVar[str] = "hankweave-harness-pi"
    Config: ClassVar[type[HarnessConfig]] = PiConfig
    default_idle_timeout_s: ClassVar[int | None] = 120  # the original's pi watchdog

    @property
    def settings(self) -> PiConfig:
        assert isinstance(self.config, PiConfig)
        return self.config

    @classmethod
    def preflight(cls, request: PreflightRequest, config: HarnessConfig
                  ) -> list[PreflightProblem]:
        """litellm, the provider's key, a price for an uncatalogued model (:mod:`.preflight`)."""
        from hankweave_harness_pi.preflight import preflight

        assert isinstance(config, PiConfig)
        model = request.model
        return preflight(request, _provider_options(config, model.provider_id),
                         _settings_for(config, model) is not None)

    async def run_codon(self, request: CodonRequest, context: AttemptContext
                        ) -> AsyncIterator[CodonLogRecord]:
        config = self.settings
        model = request.model
        sessions = SessionStore(Path(os.path.expanduser(config.sessions_dir))
                                if config.sessions_dir else context.state_dir / "sessions")
        try:
            target = route(model.provider_id, model.model_id, request.env,
                           _provider_options(config, model.provider_id))
            _warn_if_around_the_proxy(target, request.env, context)
            if request.session_id_to_resume and request.fork_session:
                # A new attempt: its own copy, so its turns never reach a later attempt.
                session = sessions.fork(request.session_id_to_resume)
            elif request.session_id_to_resume:
                session = sessions.load(request.session_id_to_resume)
            else:
                system = SYSTEM_PROMPT + (f"\n\n{request.system_prompt}"
                                          if request.system_prompt else "")
                session = sessions.new(target.display, system)
        except (CredentialsError, SessionNotFoundError) as exc:
            from hankweave.api import error_result

            # Before the agent starts: the codon fails with the reason (as the original's
            # setup failures did), classified as a local, permanent problem.
            yield error_result(str(exc))
            return
        from hankweave_harness_pi.tools import Toolbox

        toolbox = Toolbox(request.work_dir, env=request.env, sandbox=request.sandbox,
                          read_only_roots=_data_roots(request),
                          bash_timeout_s=config.bash_timeout_s,
                          max_output_chars=config.max_output_chars)
        limit = _settings_for(config, model)
        if limit is not None and limit.context_limit:
            # The agent compacts against the settings' context window for this model.
            request = dataclasses.replace(request, model=model.model_copy(
                update={"context_limit": limit.context_limit}))
        agent = importlib.import_module(AGENT_MODULE)
        async for record in agent.run_pass(request, context, config, target, sessions,
                                           session, toolbox, _price(config, model)):
            yield record


def _provider_options(config: PiConfig, provider: str) -> ProviderOptions:
    settings = config.providers.get(provider)
    if settings is None:
        return ProviderOptions()
    return ProviderOptions(api_base=settings.api_base, api_key_env=settings.api_key_env,
                           protocol=settings.protocol)


def _settings_for(config: PiConfig, model: Any) -> ModelSettings | None:
    return config.models.get(model.full_id) or config.models.get(model.full_id.lower())


def _price(config: PiConfig, model: Any) -> Any:
    """The settings' price for the model (``TokenUsage -> float``), or None."""
    settings = _settings_for(config, model)
    if settings is None:
        return None
    cache_read = settings.cache_read if settings.cache_read is not None else settings.input
    cache_write = settings.cache_write if settings.cache_write is not None else settings.input

    def price(usage: TokenUsage) -> float:
        return (usage.input_tokens * settings.input + usage.output_tokens * settings.output
                + usage.cache_read_tokens * cache_read
                + usage.cache_creation_tokens * cache_write) / 1_000_000

    return price


def _data_roots(request: CodonRequest) -> list[Any]:
    link = request.work_dir / DATA_LINK
    try:
        return [link.resolve(strict=True)] if link.is_symlink() else []
    except OSError:
        return []


def _warn_if_around_the_proxy(target: Route, env: Mapping[str, str],
                              context: AttemptContext) -> None:
    """Under ``--proxy``, a provider the proxy does not serve (its own ``apiBase``, a native
    protocol other than Anthropic's and OpenAI's) is called directly: say so, once."""
    proxy = env.get(PROXY_URL_ENV)
    if proxy and not (target.api_base or "").startswith(proxy.rstrip("/") + "/"):
        context.warn(f"Model {target.display} is called directly, not through the LLM proxy"
                     " (--proxy serves the Anthropic and OpenAI endpoints): its requests are"
                     " not in .hankweave/proxy/requests.jsonl, and its ceilings hold at its"
                     " messages only")
