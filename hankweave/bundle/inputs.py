"""``codonInputs``: one hash per codon of everything that decides what the codon does.

Comparing two locks tells which codons a change touches: the raw codon node with each file
reference replaced by ``{path, sha256}`` (a copied directory by its tree hash, a copied file with
its mode, a sentinel config file with the hashes of the files it names), the parts of the hank
every codon shares (global system prompt, ``overrides``, ``requirements.env``), a loop child's
loop settings, and the codon's position in execution order (a reorder changes what runs before
it). Derived from the files alone, so a reader can recompute it; Hankweave 0.12's preimage.
"""

from __future__ import annotations

import copy
import json
import posixpath
from typing import Any

from hankweave.bundle.canonical import canonical_json, utf8_key
from hankweave.bundle.closure import Closure, RefRecord
from hankweave.bundle.lock import sha256_hex

CODON_INPUTS_PREFIX = "hankweave-codon-inputs-v1\0"


def codon_inputs(closure: Closure) -> dict[str, str]:
    """The ``codonInputs`` of a closure that succeeded, sorted by key."""
    raw = closure.raw or {}
    shared = {"globalSystemPrompt": _global_prompt(closure, raw),
              "overrides": raw.get("overrides"),
              "requirementsEnv": [str(name).strip() for name in
                                  ((raw.get("requirements") or {}).get("env") or [])]}
    inputs: dict[str, str] = {}
    for position, (key, codon, loop) in enumerate(_flattened(raw.get("hank") or [])):
        container = None if loop is None else {
            "terminateOn": loop.get("terminateOn"), "budget": loop.get("budget"),
            "archiveOnSuccess": loop.get("archiveOnSuccess")}
        preimage = {"global": shared, "container": container, "position": position,
                    "codon": _substituted(closure, codon)}
        inputs[key] = sha256_hex(CODON_INPUTS_PREFIX + canonical_json(preimage))
    return {key: inputs[key] for key in sorted(inputs, key=utf8_key)}


def codon_keys(closure: Closure) -> list[str]:
    """The closure's codons in execution order, keyed as in ``codonInputs`` (``id``, a loop
    child ``loop/child``)."""
    return [key for key, _, _ in _flattened((closure.raw or {}).get("hank") or [])]


def _flattened(items: list[Any]) -> list[tuple[str, dict[str, Any], dict[str, Any] | None]]:
    out: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "loop":
            for child in item.get("codons") or []:
                if isinstance(child, dict):
                    out.append((f"{item.get('id')}/{child.get('id')}", child, item))
        else:
            out.append((str(item.get("id")), item, None))
    return out


def _global_prompt(closure: Closure, raw: dict[str, Any]) -> Any:
    if raw.get("globalSystemPromptText"):
        return {"text": raw["globalSystemPromptText"]}
    files = raw.get("globalSystemPromptFile")
    if files:
        refs = files if isinstance(files, list) else [files]
        return {"files": [_record(closure, "", ref).sha256 for ref in refs]}
    return None


def _record(closure: Closure, base: str, raw: str) -> RefRecord:
    return closure.refs[(base, raw)]


def _sub(closure: Closure, value: Any) -> Any:
    if value == "" or not isinstance(value, (str, list)):
        return value
    if isinstance(value, str):
        record = _record(closure, "", value)
        return {"path": record.path, "sha256": record.sha256}
    return [_sub(closure, str(ref)) for ref in value]


def _substituted(closure: Closure, codon: dict[str, Any]) -> dict[str, Any]:
    node = copy.deepcopy(codon)
    for key in ("promptFile", "appendSystemPromptFile"):
        if key in node:
            node[key] = _sub(closure, node[key])
    for item in node.get("rigSetup") or []:
        if isinstance(item, dict) and item.get("type") == "copy":
            record = _record(closure, "", str(item["copy"]["from"]))
            item["copy"]["from"] = ({"path": record.path, "sha256": record.sha256,
                                     "mode": record.mode} if record.kind == "file" else
                                    {"path": record.path, "sha256": record.sha256})
    for entry in node.get("sentinels") or []:
        if isinstance(entry, dict):
            _sentinel(closure, entry)
    return node


def _sentinel(closure: Closure, entry: dict[str, Any]) -> None:
    config = entry.get("sentinelConfig")
    if isinstance(config, str):
        record = _record(closure, "", config)
        entry["sentinelConfig"] = {"path": record.path, "sha256": record.sha256,
                                   "refs": _config_file_refs(closure, record.path)}
    elif isinstance(config, dict):
        node = copy.deepcopy(config)
        for key in ("systemPromptFile", "userPromptFile"):
            if key in node:
                node[key] = _sub(closure, node[key])
        structured = node.get("structuredOutput")
        if isinstance(structured, dict) and isinstance(structured.get("schemaFile"), str) \
                and structured["schemaFile"]:
            structured["schemaFile"] = _sub(closure, structured["schemaFile"])
        entry["sentinelConfig"] = node


def _config_file_refs(closure: Closure, config_path: str) -> dict[str, list[str]]:
    """The hashes of the files a sentinel config file names, by field, in its order (they
    resolve from the file's own folder, as the closure recorded them)."""
    config = json.loads(closure.files[config_path].data)
    base = posixpath.dirname(config_path)
    structured = config.get("structuredOutput")
    fields = {"systemPromptFile": config.get("systemPromptFile"),
              "userPromptFile": config.get("userPromptFile"),
              "schemaFile": structured.get("schemaFile") if isinstance(structured, dict)
              else None}
    refs = {}
    for label, value in fields.items():
        values = value if isinstance(value, list) else [value]
        hashes = [_record(closure, base, raw).sha256 for raw in values
                  if isinstance(raw, str) and raw]
        if hashes:
            refs[label] = hashes
    return refs
