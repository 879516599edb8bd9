"""Regenerate the built-in model catalogue from litellm's model price and limit data.

litellm keeps ``model_prices_and_context_window_backup.json`` (every provider's models, their
prices per token and their context and output limits) up to date and ships it in its wheel.
This script reads that file, keeps the chat models of the providers hankweave routes (Anthropic,
Anthropic models on Amazon Bedrock, OpenAI, Google, Mistral, DeepSeek, xAI, Groq), converts
prices to USD per million tokens, records the reasoning efforts each model takes, picks the models behind the ``haiku``, ``sonnet`` and ``opus``
aliases (the newest version of each family), and writes
``hankweave/default_plugins/model_catalogue.json``.

    python scripts/refresh_model_catalogue.py                 # from an installed litellm
    python scripts/refresh_model_catalogue.py --wheel DIR     # pip download litellm --no-deps -d DIR
    python scripts/refresh_model_catalogue.py --source FILE   # a copy of the JSON file

Nothing imports litellm: its file is read as data.  Review the diff of the catalogue before
committing it (new aliases, changed prices).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import re
import sys
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

DATA_FILE = "model_prices_and_context_window_backup.json"
ROOT = Path(__file__).resolve().parents[1]
TARGET = ROOT / "hankweave/default_plugins/model_catalogue.json"
CLAUDE_TARGET = ROOT / "hankweave-harness-claude/hankweave_harness_claude/anthropic_models.json"
"""The Claude harness's own catalogue: the Anthropic models (on Anthropic and on Bedrock),
written from the same data, which replaces the kernel's entries where the harness is installed."""

CHAT_MODES = {"chat", "responses"}
# litellm provider -> (our provider id, the key prefix litellm puts before the model id)
PROVIDERS = {
    "anthropic": ("anthropic", ""),
    "openai": ("openai", ""),
    "gemini": ("google", "gemini/"),
    "mistral": ("mistral", "mistral/"),
    "deepseek": ("deepseek", "deepseek/"),
    "xai": ("xai", "xai/"),
    "groq": ("groq", "groq/"),
}
BEDROCK = ("bedrock", "bedrock_converse")
# Not models a coding agent runs on, though litellm files some of them as chat models.
UNSUITED = re.compile(r"(^ft:|tts|audio|realtime|image|embedding|transcribe|live|guard|search|"
                      r"computer-use|deep-research|robotics|lyria|veo|imagen|moderation)")
FAMILIES = ("haiku", "sonnet", "opus")
CLAUDE_ID = re.compile(r"^claude-(?P<family>[a-z]+)-(?P<major>\d+)(?:-(?P<minor>\d{1,2}))?$")


def per_million(price: Any) -> float | None:
    """A per-token price as USD per million tokens (rounded to hide float noise)."""
    if not isinstance(price, int | float):
        return None
    return round(price * 1_000_000, 6)


def convert(data: dict[str, Any], source: str) -> dict[str, Any]:
    """The catalogue snapshot for litellm's model data."""
    models: dict[str, dict[str, Any]] = {}
    for key, info in data.items():
        entry = _entry(key, info)
        if entry is not None:
            models.setdefault(f"{entry['provider']}/{entry['id']}", entry)
    ordered = sorted(models.values(), key=lambda m: (m["provider"], m["id"]))
    return {
        "source": source,
        "generatedAt": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "aliases": _aliases(ordered),
        "models": ordered,
    }


def _entry(key: str, info: Any) -> dict[str, Any] | None:
    if not isinstance(info, dict) or info.get("mode") not in CHAT_MODES:
        return None
    located = _provider_and_id(key, info.get("litellm_provider"))
    if located is None:
        return None
    provider, model_id = located
    if UNSUITED.search(model_id):
        return None
    context, output = info.get("max_input_tokens"), info.get("max_output_tokens")
    if not (isinstance(context, int) and context > 0 and isinstance(output, int) and output > 0):
        return None
    entry: dict[str, Any] = {"provider": provider, "id": model_id, "name": _display_name(model_id),
                             "context": context, "output": output}
    prices = {"input": per_million(info.get("input_cost_per_token")),
              "output": per_million(info.get("output_cost_per_token")),
              "cacheRead": per_million(info.get("cache_read_input_token_cost")),
              "cacheWrite": per_million(info.get("cache_creation_input_token_cost"))}
    if prices["input"] is not None and prices["output"] is not None:
        entry["cost"] = {name: value for name, value in prices.items() if value is not None}
    efforts = _reasoning_efforts(info)
    if efforts:
        entry["reasoning"] = efforts
    return entry


def _reasoning_efforts(info: dict[str, Any]) -> list[str]:
    """The reasoning efforts a hank may ask of the model (``gpt-5.2-high``, ``sonnet-xhigh``):
    ``high`` for every model that reasons, ``xhigh`` where litellm says the model takes it."""
    if info.get("supports_reasoning") is not True:
        return []
    return ["high", "xhigh"] if info.get("supports_xhigh_reasoning_effort") is True else ["high"]


def _provider_and_id(key: str, litellm_provider: Any) -> tuple[str, str] | None:
    if litellm_provider in BEDROCK:
        # Region- or commitment-qualified keys ("bedrock/us-east-1/...") are price variants.
        if "/" in key or "anthropic.claude" not in key:
            return None
        return "amazon-bedrock", key
    if litellm_provider not in PROVIDERS:
        return None
    provider, prefix = PROVIDERS[litellm_provider]
    if prefix and key.startswith(prefix):
        key = key[len(prefix):]
    elif "/" in key:
        return None
    return provider, key


def _display_name(model_id: str) -> str:
    """``claude-sonnet-5-5`` -> ``Claude Sonnet 5.5``; other ids are their own names."""
    match = CLAUDE_ID.match(model_id)
    if match is None:
        return model_id
    version = match["major"] + (f".{match['minor']}" if match["minor"] else "")
    return f"Claude {match['family'].title()} {version}"


def _aliases(models: list[dict[str, Any]]) -> dict[str, str]:
    """Each family alias -> the newest undated Anthropic model of that family."""
    newest: dict[str, tuple[tuple[int, int], str]] = {}
    for model in models:
        match = CLAUDE_ID.match(model["id"]) if model["provider"] == "anthropic" else None
        if match is None or match["family"] not in FAMILIES:
            continue
        version = (int(match["major"]), int(match["minor"] or 0))
        if match["family"] not in newest or version > newest[match["family"]][0]:
            newest[match["family"]] = (version, f"anthropic/{model['id']}")
    return {family: newest[family][1] for family in FAMILIES if family in newest}


def read_source(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """litellm's data and a description of where it came from."""
    if args.source:
        return json.loads(Path(args.source).read_text(encoding="utf-8")), Path(args.source).name
    if args.wheel:
        wheels = sorted(Path(args.wheel).glob("litellm-*.whl"))
        if not wheels:
            sys.exit(f"no litellm wheel in {args.wheel} (pip download litellm --no-deps -d DIR)")
        with zipfile.ZipFile(wheels[-1]) as wheel:
            data = json.loads(wheel.read(f"litellm/{DATA_FILE}"))
        version = wheels[-1].name.split("-")[1]
        return data, f"litellm {version}, litellm/{DATA_FILE}"
    spec = importlib.util.find_spec("litellm")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        sys.exit("litellm is not installed; pass --wheel DIR or --source FILE")
    path = Path(next(iter(spec.submodule_search_locations))) / DATA_FILE
    version = importlib.metadata.version("litellm")
    return json.loads(path.read_text(encoding="utf-8")), f"litellm {version}, litellm/{DATA_FILE}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", help="a directory holding a downloaded litellm wheel")
    parser.add_argument("--source", help="a copy of litellm's model data JSON file")
    parser.add_argument("--output", default=str(TARGET), help="where to write the catalogue")
    parser.add_argument("--claude-output", default=str(CLAUDE_TARGET),
                        help="where to write the Claude harness's Anthropic catalogue")
    args = parser.parse_args()
    data, source = read_source(args)
    snapshot = convert(data, source)
    write(Path(args.output), snapshot)
    write(Path(args.claude_output), anthropic_subset(snapshot))


def anthropic_subset(snapshot: dict[str, Any]) -> dict[str, Any]:
    """The Anthropic models of ``snapshot`` (Bedrock's included) and their aliases."""
    def anthropic(model: dict[str, Any]) -> bool:
        return model["provider"] == "anthropic" or (
            model["provider"] == "amazon-bedrock" and ".anthropic." in f".{model['id']}")

    models = [model for model in snapshot["models"] if anthropic(model)]
    ids = {f"{model['provider']}/{model['id']}" for model in models}
    aliases = {alias: full for alias, full in snapshot["aliases"].items() if full in ids}
    return {**snapshot, "aliases": aliases, "models": models}


def write(path: Path, snapshot: dict[str, Any]) -> None:
    path.write_text(json.dumps(snapshot, indent=1) + "\n", encoding="utf-8")
    print(f"{len(snapshot['models'])} models, aliases {snapshot['aliases']} -> {path}")


if __name__ == "__main__":
    main()
