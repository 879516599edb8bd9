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

import enum
import re

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

ANY_PROVIDER = "*"
"""The :attr:`ProviderEntry.provider_id` of the entry used for providers without their own."""


class UnknownModelError(LookupError):
    """A model name matches no catalogue entry, alias or short id."""


class ReasoningEffortError(UnknownModelError):
    """A reasoning variant (``gpt-4o-high``) of a model that cannot reason."""


class ReasoningEffort(enum.StrEnum):
    """How hard a model thinks, as a hank asks for it with a suffix (``gpt-5.2-high``,
    ``sonnet-xhigh``).  Without a suffix the model runs at its harness's default."""

    HIGH = "high"
    XHIGH = "xhigh"

    @property
    def cost_multiplier(self) -> float:
        """The original prices ``-xhigh`` variants at twice their model's price (and ``-high``
        at its price): the catalogue's prices are multiplied by this."""
        return 2.0 if self is ReasoningEffort.XHIGH else 1.0


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
    reasoning_efforts: tuple[ReasoningEffort, ...] = ()
    """The reasoning efforts the model takes (empty: it does not reason, and a hank cannot ask
    for a ``-high`` or ``-xhigh`` variant of it)."""
    reasoning_effort: ReasoningEffort | None = None
    """The effort this codon's model runs at, from a variant spelling (``gpt-5.2-xhigh``); None
    for the harness's default.  The entry keeps the model's own ids: harnesses pass the effort
    to their agent (``docs/harnesses.md``, "Reasoning effort")."""

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

    @property
    def strongest_effort(self) -> ReasoningEffort | None:
        """The highest reasoning effort the model takes, or None when it does not reason."""
        return max(self.reasoning_efforts, key=list(ReasoningEffort).index, default=None)

    def at_effort(self, effort: ReasoningEffort) -> ModelEntry:
        """This model run at ``effort``, priced as the original prices its variants
        (:attr:`ReasoningEffort.cost_multiplier`)."""
        factor = effort.cost_multiplier
        cost = None if self.cost is None else ModelCost(
            input=self.cost.input * factor, output=self.cost.output * factor,
            cache_read=self.cost.cache_read * factor, cache_write=self.cost.cache_write * factor)
        return self.model_copy(update={"reasoning_effort": effort, "cost": cost})


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
    reasoning: tuple[ReasoningEffort, ...] = ()
    """The reasoning efforts the model takes; empty when it does not reason."""


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
                output_limit=model.output, cost=cost, reasoning_efforts=model.reasoning))
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
                      output_limit=PLACEHOLDER_OUTPUT_LIMIT, harness_override=PI_ROUTE,
                      # The original assumes such a model reasons.
                      reasoning_efforts=tuple(ReasoningEffort))


# --------------------------------------------------------------------------------------------
# Reasoning variants and fuzzy names (docs/behaviour.md §4.2)
# --------------------------------------------------------------------------------------------

SHORTCUTS = {"opus": "claude-opus", "sonnet": "claude-sonnet", "haiku": "claude-haiku"}
"""The original's shortnames, searched as these words when no alias of that name exists."""
FUZZY_THRESHOLD = 0.6
"""The lowest score a fuzzy match may have (the original's)."""
TIE_GAP = 0.2
"""Candidates within this score of the best are near ties, ordered by preferred provider, exact
words and recency rather than by score (the original's)."""
_WORD_SIMILARITY = 0.75
_WORDS = re.compile(r"[-_\s]+")
_DATE = re.compile(r"(?<!\d)(\d{4})-?(\d{2})-?(\d{2})(?!\d)")
_NUMBER = re.compile(r"\d+")


class MatchKind(enum.Enum):
    """How a model name found its catalogue entry."""

    EXACT = "exact"
    """A ``provider/model`` id, an alias, a bare id or a ``pi/...`` route."""
    FUZZY = "fuzzy"
    """The closest catalogue model to a name that is none of those (``gemini-flash``)."""


class Resolution(BaseModel):
    """What a hank's model name resolved to, and how."""

    model_config = ConfigDict(frozen=True, protected_namespaces=())

    spec: str
    model: ModelEntry
    match: MatchKind = MatchKind.EXACT
    requested_effort: ReasoningEffort | None = None
    """The effort the spelling asked for; :attr:`ModelEntry.reasoning_effort` is the one run
    (lower when the model does not take the one asked for)."""
    also_close: tuple[str, ...] = ()
    """Other models of other families a fuzzy match found as close (full ids)."""

    @property
    def notice(self) -> str | None:
        """One line saying what the name means, when that is not plain from the name: a fuzzy
        match, or an effort the model does not take; None otherwise."""
        parts = []
        if self.match is MatchKind.FUZZY:
            parts.append("the closest catalogue model")
            if self.also_close:
                parts.append(f"also close: {', '.join(self.also_close)}")
        run = self.model.reasoning_effort
        if self.requested_effort is not None and run is not self.requested_effort:
            parts.append(f"it takes no {self.requested_effort} reasoning effort")
        if not parts:
            return None
        effort = f" at reasoning effort {run}" if run is not None else ""
        return f'model "{self.spec}" resolved to {self.model.full_id}{effort} ({"; ".join(parts)})'


def split_effort(spec: str) -> tuple[str, ReasoningEffort | None]:
    """``gpt-5.2-xhigh`` -> (``gpt-5.2``, xhigh); a spelling without a variant suffix -> (it,
    None)."""
    for effort in (ReasoningEffort.XHIGH, ReasoningEffort.HIGH):
        suffix = f"-{effort.value}"
        if spec.lower().endswith(suffix) and len(spec) > len(suffix):
            return spec[: -len(suffix)], effort
    return spec, None


def with_effort(model: ModelEntry, spec: str, effort: ReasoningEffort) -> ModelEntry:
    """``model`` run at ``effort``, or at its strongest when it does not take ``effort``;
    :class:`ReasoningEffortError` when it does not reason."""
    if not model.reasoning_efforts:
        raise ReasoningEffortError(
            f'"{spec}" asks for reasoning effort {effort}, but {model.full_id} does not reason'
            f" (no -high or -xhigh variant); name the model without the suffix")
    runs = effort if effort in model.reasoning_efforts else model.strongest_effort
    assert runs is not None  # reasoning_efforts is not empty
    return model.at_effort(runs)


def similarity(a: str, b: str) -> float:
    """``1 - levenshtein(a, b) / max(len)``, case-insensitive: 1 for equal strings."""
    a, b = a.lower(), b.lower()
    if a == b:
        return 1.0
    if not a or not b:
        return 0.0
    previous = list(range(len(b) + 1))
    for i, char in enumerate(a, 1):
        current = [i]
        for j, other in enumerate(b, 1):
            current.append(min(previous[j - 1] + (char != other), previous[j] + 1,
                               current[j - 1] + 1))
        previous = current
    return 1 - previous[-1] / max(len(a), len(b))


def guessed_provider(name: str) -> str | None:
    """:func:`preferred_provider`, else the provider of a family word the name nearly spells
    (``cluade-sonnet`` -> ``anthropic``), as the original guesses."""
    found = preferred_provider(name)
    if found is not None:
        return found
    words = [word for word in _WORDS.split(name.lower()) if len(word) >= 3]
    for family, provider in (("claude", "anthropic"), ("gemini", "google"), ("gpt", "openai"),
                             ("deepseek", "deepseek")):
        if any(similarity(word, family) >= _WORD_SIMILARITY for word in [name.lower(), *words]):
            return provider
    return None


class FuzzyMatch(BaseModel):
    """One catalogue model scored against a name."""

    model_config = ConfigDict(frozen=True, protected_namespaces=())

    model: ModelEntry
    score: float
    preferred: bool
    exact_words: bool

    @property
    def family(self) -> str:
        """The model id without its version numbers and dates (``gemini-flash`` for
        ``gemini-3.8-flash``): models of one family are alternatives, not ambiguities."""
        bare = _NUMBER.sub("", _DATE.sub("", self.model.model_id.lower()))
        return "-".join(word for word in re.split(r"[-_.:\s]+", bare) if word)


def fuzzy_matches(name: str, models: list[ModelEntry]) -> list[FuzzyMatch]:
    """The models ``name`` may mean, scored, best first: near ties (within :data:`TIE_GAP` of
    the best) ordered by preferred provider, exact words and recency, then the rest by score.

    A version the name gives is kept: ``gemini-3-flash`` may mean ``gemini-3.8-flash``, but
    ``gpt-7`` means no ``gpt-5`` (the original would take it)."""
    preferred = guessed_provider(name)
    wanted = version_of(name)
    scored = [_score(name, model, preferred) for model in models
              if recency(model)[0][: len(wanted)] == wanted]
    if not scored:
        return []
    best = max(match.score for match in scored)
    near = sorted((m for m in scored if best - m.score <= TIE_GAP),
                  key=lambda m: (m.preferred, m.exact_words, recency(m.model), m.score),
                  reverse=True)
    rest = sorted((m for m in scored if best - m.score > TIE_GAP), key=lambda m: -m.score)
    return near + rest


def closest_models(name: str, models: list[ModelEntry], count: int = 5) -> list[ModelEntry]:
    """The ``count`` models scoring best against ``name``, whatever their version, for an
    error that names what the hank may have meant."""
    preferred = guessed_provider(name)
    scored = sorted((_score(name, model, preferred) for model in models),
                    key=lambda m: -m.score)
    return [match.model for match in scored[:count]]


def _score(name: str, model: ModelEntry, preferred: str | None) -> FuzzyMatch:
    """The original's score: the better of the id's and the display name's similarity, each
    raised 0.2 when it contains the name and 0.15 when it has every word of it (of 2+ words of
    3+ characters), and 0.1 for the preferred provider; at most 1."""
    query = name.lower()
    words = [word for word in _WORDS.split(query) if len(word) >= 3]
    exact = False
    scores = []
    for text in (model.model_id.lower(), model.name.lower()):
        score = similarity(query, text) + (0.2 if query in text else 0.0)
        own = _WORDS.split(text)
        if len(words) >= 2 and all(_word_found(word, own) for word in words):
            score += 0.15
            exact = exact or all(word in own for word in words)
        scores.append(min(1.0, score))
    is_preferred = preferred is not None and model.provider_id.lower() == preferred
    score = min(1.0, max(scores) + (0.1 if is_preferred else 0.0))
    return FuzzyMatch(model=model, score=score, preferred=is_preferred, exact_words=exact)


def _word_found(word: str, words: list[str]) -> bool:
    # Not `other in word`: "xhigh" must not match "high".
    return any(word == other or word in other or similarity(word, other) >= _WORD_SIMILARITY
               for other in words)


def version_of(name: str) -> tuple[int, ...]:
    """The version numbers of a model name, date stamps left out (``gemini-3.8-flash`` -> 3, 8;
    ``claude-sonnet-4-5-20250929`` -> 4, 5)."""
    return tuple(int(n) for n in _NUMBER.findall(_DATE.sub("", name.lower())))


def recency(model: ModelEntry) -> tuple[tuple[int, ...], str]:
    """How new a model is, from its id: its version numbers, then a date stamp.  The catalogue
    carries no release dates (the original's models.dev data has ``last_updated``); versions
    order a family as dates would."""
    model_id = model.model_id.lower()
    date = "".join(max(_DATE.findall(model_id), default=()))
    return version_of(model_id), date
