"""Model spellings the original accepts: reasoning variants (``gpt-5-high``, ``sonnet-xhigh``)
and fuzzy names (``gemini-flash``, ``claude-sonnet``), resolved over the bundled catalogue."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hankweave.app.preflight import run_preflight
from hankweave.models import (
    MatchKind,
    ModelEntry,
    ReasoningEffort,
    ReasoningEffortError,
    UnknownModelError,
    similarity,
)
from hankweave.registry import Registry, builtin_registry


@pytest.fixture
def registry() -> Registry:
    """The kernel's built-in plugins alone: the bundled catalogue, no installed plugin."""
    return builtin_registry()


def catalogue(registry: Registry, full_id: str) -> ModelEntry:
    return registry.models()[full_id]


def newest(registry: Registry, provider: str, pattern: str) -> str:
    """The full id of the provider's model whose id matches ``pattern`` with the highest
    version (the numbers of its ``version`` group): an oracle independent of the scoring."""
    found = [(tuple(int(n) for n in re.findall(r"\d+", match["version"])), m.full_id)
             for m in registry.models().values() if m.provider_id == provider
             and (match := re.fullmatch(pattern, m.model_id))]
    assert found, f"the catalogue has no {provider} model like {pattern}"
    return max(found)[1]


# ----- reasoning variants -----

@pytest.mark.parametrize(("spec", "full_id", "effort"), [
    ("gpt-5-high", "openai/gpt-5", ReasoningEffort.HIGH),
    ("openai/gpt-5.2-xhigh", "openai/gpt-5.2", ReasoningEffort.XHIGH),
    ("GPT-5.2-XHIGH", "openai/gpt-5.2", ReasoningEffort.XHIGH),
    ("claude-sonnet-4-5-high", "anthropic/claude-sonnet-4-5", ReasoningEffort.HIGH),
    ("gemini-2.5-flash-high", "google/gemini-2.5-flash", ReasoningEffort.HIGH),
])
def test_a_variant_keeps_the_models_identity_and_carries_the_effort(
        registry: Registry, spec: str, full_id: str, effort: ReasoningEffort) -> None:
    model = registry.resolve_model(spec)

    assert (model.full_id, model.reasoning_effort) == (full_id, effort)
    assert model.context_limit == catalogue(registry, full_id).context_limit


def test_an_alias_takes_a_variant_suffix(registry: Registry) -> None:
    sonnet = registry.resolve_model("sonnet")

    high = registry.resolve_model("sonnet-high")

    assert high.full_id == sonnet.full_id
    assert high.reasoning_effort is ReasoningEffort.HIGH
    assert sonnet.reasoning_effort is None


def test_a_pi_route_takes_a_variant_suffix(registry: Registry) -> None:
    model = registry.resolve_model("pi/openai/gpt-5.2-high")

    assert (model.full_id, model.harness_override) == ("openai/gpt-5.2", "pi")
    assert model.reasoning_effort is ReasoningEffort.HIGH


def test_xhigh_costs_twice_the_catalogue_price_and_high_the_price(registry: Registry) -> None:
    base = catalogue(registry, "openai/gpt-5.2")
    assert base.cost is not None and ReasoningEffort.XHIGH in base.reasoning_efforts

    high = registry.resolve_model("gpt-5.2-high").cost
    xhigh = registry.resolve_model("gpt-5.2-xhigh").cost

    assert high == base.cost
    assert xhigh is not None
    assert (xhigh.input, xhigh.output, xhigh.cache_read) == (
        2 * base.cost.input, 2 * base.cost.output, 2 * base.cost.cache_read)


def test_xhigh_on_a_model_that_stops_at_high_runs_at_high_and_says_so(
        registry: Registry) -> None:
    base = catalogue(registry, "openai/gpt-5")
    assert base.reasoning_efforts == (ReasoningEffort.HIGH,)

    resolution = registry.resolve("openai/gpt-5-xhigh")

    assert resolution.model.reasoning_effort is ReasoningEffort.HIGH
    assert resolution.model.cost == base.cost  # priced as what runs
    assert resolution.notice == (
        'model "openai/gpt-5-xhigh" resolved to openai/gpt-5 at reasoning effort high (it takes'
        " no xhigh reasoning effort)")


def test_a_variant_of_a_model_that_does_not_reason_is_refused(registry: Registry) -> None:
    assert catalogue(registry, "openai/gpt-4o").reasoning_efforts == ()

    with pytest.raises(ReasoningEffortError, match=r'"gpt-4o-high" asks for reasoning effort high,'
                       r" but openai/gpt-4o does not reason"):
        registry.resolve_model("gpt-4o-high")


def test_a_variant_of_an_unknown_model_says_how_it_was_read(registry: Registry) -> None:
    with pytest.raises(UnknownModelError, match=r'"gpt-9-high" is read as "gpt-9" at reasoning'
                       r' effort high: Unknown model "gpt-9"'):
        registry.resolve_model("gpt-9-high")


def test_the_catalogue_says_which_models_reason() -> None:
    """The bundled data carries litellm's reasoning flags, so variants are not guessed."""
    data = json.loads((Path(__file__).parents[1] / "hankweave/default_plugins/"
                       "model_catalogue.json").read_text())
    efforts = {f"{m['provider']}/{m['id']}": m.get("reasoning", []) for m in data["models"]}
    assert efforts["openai/gpt-5.2"] == ["high", "xhigh"]
    assert efforts["openai/gpt-4o"] == []
    assert sum(1 for found in efforts.values() if found) > len(efforts) / 2


# ----- fuzzy names -----

def test_gemini_flash_is_the_newest_numbered_gemini_flash(registry: Registry) -> None:
    resolution = registry.resolve("gemini-flash")

    assert resolution.match is MatchKind.FUZZY
    assert resolution.model.full_id == newest(registry, "google",
                                              r"gemini-(?P<version>[\d.]+)-flash")


@pytest.mark.parametrize("family", ["sonnet", "haiku", "opus"])
def test_claude_family_names_are_the_newest_of_the_family(registry: Registry,
                                                          family: str) -> None:
    expected = newest(registry, "anthropic", rf"claude-{family}-(?P<version>\d+(-\d{{1,2}})?)")

    for spec in (family, f"claude-{family}", f"anthropic/{family}", f"Claude-{family.title()}"):
        assert registry.resolve_model(spec).full_id == expected, spec


def test_an_exact_name_is_not_explained_and_a_fuzzy_one_is(registry: Registry) -> None:
    assert registry.resolve("gemini-2.5-flash").notice is None
    assert registry.resolve("sonnet").notice is None

    notice = registry.resolve("claude-sonnet").notice

    assert notice is not None
    assert notice.startswith(f'model "claude-sonnet" resolved to'
                             f" {registry.resolve_model('sonnet').full_id} (the closest")


def test_a_near_tie_of_another_family_is_named(registry: Registry) -> None:
    """``gemini-flash`` is as close to ``gemini-flash-latest`` as to the newest numbered flash
    model: the author is told both."""
    resolution = registry.resolve("gemini-flash")

    assert "google/gemini-flash-latest" in resolution.also_close
    assert resolution.notice is not None and "also close: google/gemini-flash-latest" in (
        resolution.notice)


def test_a_typo_in_a_family_word_still_finds_the_family(registry: Registry) -> None:
    assert registry.resolve_model("cluade-sonnet").full_id == registry.resolve_model(
        "sonnet").full_id


def test_a_version_the_catalogue_lacks_is_unknown_and_lists_the_closest(
        registry: Registry) -> None:
    with pytest.raises(UnknownModelError) as caught:
        registry.resolve_model("gpt-7")

    message = str(caught.value)
    assert message.startswith('Unknown model "gpt-7": not a catalogue model id')
    closest = re.search(r"closest: ([^;]+);", message)
    assert closest is not None
    named = closest.group(1).split(", ")
    assert len(named) == 5 and all(name.startswith("openai/gpt-") for name in named)


def test_a_name_like_nothing_lists_candidates_and_aliases(registry: Registry) -> None:
    with pytest.raises(UnknownModelError, match=r"closest: \S+/.*; aliases: haiku, opus, sonnet"):
        registry.resolve_model("no-such-model")


def test_similarity_is_one_minus_the_edit_distance_over_the_longer_length() -> None:
    assert similarity("gemini", "Gemini") == 1.0
    assert similarity("kitten", "sitting") == pytest.approx(1 - 3 / 7)
    assert similarity("", "x") == 0.0


# ----- the preflight -----

def write_hank(root: Path, models: list[str]) -> Path:
    codons = [{"id": f"c{index}", "name": f"C{index}", "model": model,
               "continuationMode": "fresh", "promptText": "Go."}
              for index, model in enumerate(models)]
    path = root / "hank.json"
    path.write_text(json.dumps({"hank": codons}))
    return path


def test_the_preflight_explains_each_fuzzy_name_once(tmp_path: Path, registry: Registry) -> None:
    hank = write_hank(tmp_path, ["gemini-flash", "gemini-flash", "gpt-5.2-high"])

    report = run_preflight(hank, env={}, registry=registry, check_harnesses=False)

    assert report.errors == []
    explained = [w for w in report.warnings if "resolved to" in w]
    assert len(explained) == 1
    assert explained[0].startswith('hank[0].model: model "gemini-flash" resolved to google/')
    assert [m.model.reasoning_effort for m in report.models if m.model] == [
        None, None, ReasoningEffort.HIGH]


def test_the_preflight_names_the_codon_of_a_variant_that_cannot_reason(
        tmp_path: Path, registry: Registry) -> None:
    hank = write_hank(tmp_path, ["gpt-5.2", "gpt-4o-xhigh"])

    report = run_preflight(hank, env={}, registry=registry, check_harnesses=False)

    [issue] = report.errors
    assert issue.path == "hank[1].model"
    assert issue.message.startswith("Invalid model 'gpt-4o-xhigh' (codon c1): ")
    assert "openai/gpt-4o does not reason" in issue.message
