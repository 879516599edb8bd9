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
