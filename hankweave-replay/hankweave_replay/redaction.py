"""Redacting a staged recording: every secret it must find is learnt first, then every file is
rewritten with ``[REDACTED:<kind>]`` (two passes, so a value is redacted everywhere, not only
where it was assigned)."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hankweave_replay.format import HANK_DIR, STATE_FILE

if TYPE_CHECKING:
    from hankweave.api import Redactor

_HANK_ENV_KEYS = frozenset({"env", "environment", "envVars"})
"""The key of a codon's ``env`` map, and the spellings the hank loader corrects to it (only in
hank files: ``execution-meta.json``'s ``environment`` describes the machine)."""


def redact_tree(root: Path, env: Mapping[str, str]) -> tuple[Counter[str], list[str]]:
    """Replace every secret in every file under ``root`` (symlinks of snapshots are not
    files); return the redactions by kind and the files that had any, in sorted order."""
    files: dict[str, Path] = {}
    for directory, _, names in os.walk(root):  # never follows a link
        for name in names:
            path = Path(directory, name)
            if not path.is_symlink():
                files[path.relative_to(root).as_posix()] = path
    redactor = _export_redactor(files, env)
    counted: Counter[str] = Counter()
    redacted_files: list[str] = []
    for relative, path in sorted(files.items()):
        redacted, counts = redactor.redact_bytes(path.read_bytes())
        if counts:
            mode = stat.S_IMODE(path.stat().st_mode)
            path.write_bytes(redacted)
            path.chmod(mode)
            counted.update(counts)
            redacted_files.append(relative)
    return counted, redacted_files


def _export_redactor(files: Mapping[str, Path], env: Mapping[str, str]) -> Redactor:
    """The redactor of one recording, told every secret it must find before it redacts.

    Known before reading: the values of every ``env`` map in the staged hank directory's JSON
    files and ``state.json`` (whatever the variable's name), and the exporting shell's
    ``HANKWEAVE_<X>`` passthrough values and secret-looking variables.  Then this first pass
    over every staged file learns the values assigned to provider-key variables in it
    (``OPENAI_API_KEY=...`` an agent printed), so they are redacted everywhere, not only where
    they were assigned.
    """
    from hankweave.api import Redactor, hankweave_passthrough

    redactor = Redactor()
    for relative, path in files.items():
        in_hank = relative.startswith(f"{HANK_DIR}/") and relative.endswith(".json")
        if in_hank or relative == STATE_FILE:
            with contextlib.suppress(ValueError):
                keys = _HANK_ENV_KEYS if in_hank else frozenset({"env"})
                for env_map in _env_maps(json.loads(path.read_bytes()), keys):
                    redactor.add_env(env_map)
    redactor.add_env(hankweave_passthrough(env).set)
    redactor.add_env(env, secret_names_only=True)
    for path in files.values():  # one file in memory at a time: snapshots may be large
        redactor.learn(path.read_bytes().decode("utf-8", "surrogateescape"))
    return redactor


def _env_maps(value: Any, keys: frozenset[str]) -> Iterator[Mapping[str, str]]:
    """Every ``env`` map (an object of strings under one of ``keys``) in parsed JSON: the
    codons' in the hank file and in the state's recorded plan, and any other a later format
    adds."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in keys and isinstance(item, dict) and \
                    all(isinstance(v, str) for v in item.values()):
                yield item
            else:
                yield from _env_maps(item, keys)
    elif isinstance(value, list):
        for item in value:
            yield from _env_maps(item, keys)
