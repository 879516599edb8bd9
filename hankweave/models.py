"""The model catalogue: which models a codon may name, what they cost, and how they are routed.

Plugins fill the catalogue through the ``register_models`` hook with two kinds of entry:

* :class:`ModelEntry`, one model of one provider (``anthropic/claude-haiku-4-5``): its display
  name, its short aliases (``haiku``), its limits and its price per million tokens;
* :class:`ProviderEntry`, one provider's routing: the harness that runs its models and the
  distribution that provides that harness, so "not installed" errors can say what to install.

Prices are USD per million tokens, as on the providers' price pages (and in models.dev, the
catalogue the original bundles).  Resolution of the names a hank uses lives in
:class:`hankweave.registry.Registry`; these are only the entry types.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

ANY_PROVIDER = "*"
"""The :attr:`ProviderEntry.provider_id` of the entry used for providers without their own."""


class UnknownModelError(LookupError):
    """A model name matches no catalogue entry, alias or short id."""


class ModelCost(BaseModel):
    """Prices in USD per million tokens; a price the provider does not charge is 0."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(default=0.0, ge=0)
    output: float = Field(default=0.0, ge=0)
    cache_read: float = Field(default=0.0, ge=0)
    cache_write: float = Field(default=0.0, ge=0)


class ModelEntry(BaseModel):
    """One model of one provider, as the catalogue knows it."""

    # "model_id" would otherwise trip pydantic's reserved "model_" prefix.
    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=())

    provider_id: str = Field(min_length=1)
    """The provider, as in hank files (``anthropic``, ``amazon-bedrock``, ``openai``)."""
    model_id: str = Field(min_length=1)
    """The provider's id for the model (``claude-haiku-4-5``)."""
    name: str = Field(min_length=1)
    """Display name (``Claude Haiku 4.5``)."""
    aliases: tuple[str, ...] = ()
    """Short names a hank may use instead of the full id (``haiku``); matched case-insensitively."""
    context_limit: int = Field(gt=0)
    """Context window in tokens."""
    output_limit: int = Field(gt=0)
    """Maximum output tokens of one response."""
    cost: ModelCost | None = None
    """Prices; None when unknown (such a model's usage then counts as $0, as in the original)."""
    harness_override: str | None = None
    """A harness name that runs this model whatever its provider's routing says."""

    @field_validator("aliases")
    @classmethod
    def _aliases_are_names(cls, aliases: tuple[str, ...]) -> tuple[str, ...]:
        for alias in aliases:
            if not alias.strip() or "/" in alias:
                raise ValueError(f"alias {alias!r} must be a non-empty name without '/'")
        return aliases

    @property
    def full_id(self) -> str:
        """``<provider_id>/<model_id>``: the key codon costs and the catalogue use."""
        return f"{self.provider_id}/{self.model_id}"


class ProviderEntry(BaseModel):
    """How one provider's models are routed to a harness."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider_id: str = Field(min_length=1)
    """The provider id, or ``"*"`` (:data:`ANY_PROVIDER`) for every provider without an entry."""
    harness: str = Field(min_length=1)
    """The registered name of the harness that runs this provider's models."""
    package: str = Field(min_length=1)
    """The distribution to ``pip install`` when that harness is missing."""
    model_pattern: str | None = None
    """A regular expression (searched, case-insensitive) that a model id must match for this
    entry to apply; other models of the provider fall through to the ``"*"`` entry.  Bedrock
    uses it: only its ``anthropic.`` models run on the Claude harness."""

    @field_validator("model_pattern")
    @classmethod
    def _pattern_compiles(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"model_pattern {pattern!r} is not a valid regex: {exc}") from exc
        return pattern

    def applies_to(self, model: ModelEntry) -> bool:
        """Whether this entry routes ``model`` (its provider matches, and its pattern if any)."""
        if (
            self.provider_id != ANY_PROVIDER
            and self.provider_id.lower() != model.provider_id.lower()
        ):
            return False
        return self.model_pattern is None or bool(
            re.search(self.model_pattern, model.model_id, re.IGNORECASE)
        )


# --------------------------------------------------------------------------------------------
# The bundled catalogue file (hankweave/default_plugins/model_catalogue.json)
# --------------------------------------------------------------------------------------------


class _SnapshotModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel,
                              populate_by_name=True)


class SnapshotCost(_SnapshotModel):
    """USD per million tokens; a price the source does not list is 0."""

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: float = Field(default=0.0, ge=0)
    cache_write: float = Field(default=0.0, ge=0)


class SnapshotModel(_SnapshotModel):
    """One model in the catalogue file."""

    provider: str = Field(min_length=1)
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    context: int = Field(gt=0)
    output: int = Field(gt=0)
    cost: SnapshotCost | None = None


class CatalogueSnapshot(_SnapshotModel):
    """The catalogue file: generated models with their prices and limits, and the aliases."""

    source: str
    """Where the data came from (``litellm 1.110.2, litellm/model_prices_...json``)."""
    generated_at: str
    aliases: dict[str, str]
    """Alias -> the ``provider/model`` id it names (``sonnet`` -> ``anthropic/claude-...``)."""
    models: list[SnapshotModel]

    def entries(self) -> list[ModelEntry]:
        """The models as catalogue entries, each with the aliases that name it."""
        aliases: dict[str, list[str]] = {}
        for alias, full_id in self.aliases.items():
            aliases.setdefault(full_id.lower(), []).append(alias)
        entries = []
        for model in self.models:
            cost = None if model.cost is None else ModelCost(**model.cost.model_dump())
            full_id = f"{model.provider}/{model.id}".lower()
            entries.append(ModelEntry(
                provider_id=model.provider, model_id=model.id, name=model.name,
                aliases=tuple(aliases.pop(full_id, ())), context_limit=model.context,
                output_limit=model.output, cost=cost))
        if aliases:
            raise ValueError(f"catalogue aliases name models it does not have: {sorted(aliases)}")
        return entries


# --------------------------------------------------------------------------------------------
# How hanks spell models (docs/behaviour.md §4.2)
# --------------------------------------------------------------------------------------------

PI_ROUTE = "pi"
"""The prefix (``pi/<provider>/<model>``) that runs a model on the pi harness whatever its
provider, and the harness name it sets as :attr:`ModelEntry.harness_override`."""

_PROVIDER_ALIASES = {"zhipuai": "zai", "z-ai": "zai", "moonshot": "moonshotai",
                     "moonshot-ai": "moonshotai"}
_PREFERRED_PROVIDERS = (("claude", "anthropic"), ("gemini", "google"), ("deepseek", "deepseek"))
_PREFERRED_PREFIXES = (("glm-", "zhipuai"), ("gpt-", "openai"), ("o1-", "openai"),
                       ("o3-", "openai"))
# What the original assumes of a pi model the catalogue does not know.
PLACEHOLDER_CONTEXT_LIMIT = 200_000
PLACEHOLDER_OUTPUT_LIMIT = 64_000


def rewrite_model_spec(spec: str) -> str:
    """A model spelling in its canonical form: ``opencode/x`` and ``openrouter/x`` become pi
    routes (``pi/x``, ``pi/openrouter/x``), and provider aliases (``z-ai``, ``moonshot``) the
    provider's id.  Everything else is returned stripped."""
    spec = spec.strip()
    head, slash, rest = spec.partition("/")
    if slash and rest:
        if head.lower() == "opencode":
            spec = f"{PI_ROUTE}/{rest}"
        elif head.lower() == "openrouter":
            spec = f"{PI_ROUTE}/openrouter/{rest}"
    parts = spec.split("/")
    provider_at = 1 if parts[0].lower() == PI_ROUTE and len(parts) > 2 else 0
    if len(parts) > 1 and parts[provider_at].lower() in _PROVIDER_ALIASES:
        parts[provider_at] = _PROVIDER_ALIASES[parts[provider_at].lower()]
    return "/".join(parts)


def preferred_provider(model_id: str) -> str | None:
    """The provider a bare model name most likely means (``gpt-5.2`` -> ``openai``)."""
    name = model_id.lower()
    for word, provider in _PREFERRED_PROVIDERS:
        if word in name:
            return provider
    for prefix, provider in _PREFERRED_PREFIXES:
        if name.startswith(prefix):
            return provider
    return None


def pi_provider_for(model_id: str) -> str:
    """The provider of a bare ``pi/<model>`` the catalogue does not know, as the original guesses."""
    name = model_id.lower()
    if name.startswith("gemini-"):
        return "google"
    if name.startswith(("gpt-", "o1", "o3")):
        return "openai"
    return "anthropic"


def placeholder_model(provider_id: str, model_id: str) -> ModelEntry:
    """A model the catalogue does not know, run on pi: no price, the original's default limits."""
    return ModelEntry(provider_id=provider_id, model_id=model_id, name=model_id,
                      context_limit=PLACEHOLDER_CONTEXT_LIMIT,
                      output_limit=PLACEHOLDER_OUTPUT_LIMIT, harness_override=PI_ROUTE)
