"""The strict-reference preflight: every file a hank refers to stays inside the hank directory.

A hank refers to files by *hank refs* (docs/behaviour.md §1.10): prompt files, system prompt files,
rig copy sources and sentinel configs, plus the files a sentinel config names itself. Before any
of those files is read, :func:`check_hank_refs` applies the policy to every one of them and
returns *all* violations, each at its JSON path:

* R1, portable spelling: no absolute path, drive letter, backslash or NUL;
* R2, containment: the normalised path never climbs above the hank directory;
* R3, no symlinks: walking from `realpath(hank_dir)` with `lstat`, no component is a symlink;
* copy trees: a copied directory holds only regular files and directories.

Only the hank directory's own ancestry is canonicalised, so reaching the hank through a symlink
(macOS `/tmp`) is fine; a symlink *below* it is not. :func:`check_ref_files_exist` then checks
that each file exists and has the right kind, and :func:`verify_hank_refs` runs both passes in
order and raises one :class:`~hankweave.config.errors.HankValidationError`.
"""

from __future__ import annotations

import json
import os
import posixpath
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from hankweave.config.errors import HankIssue, HankValidationError, PathSegment, format_path
from hankweave.config.hank import (
    Codon,
    HankFile,
    RigCopy,
    escapes_base,
    forbidden_ref_spelling,
    ref_spelling_message,
)

RefKind = Literal["prompt", "system-prompt", "copy-source", "sentinel-config", "sentinel-file"]
"""What a ref points at: decides which existence checks apply."""

# Refs inside a sentinel config: (keys to the value, label used in messages).
_SENTINEL_CONFIG_REFS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("systemPromptFile",), "systemPromptFile"),
    (("userPromptFile",), "userPromptFile"),
    (("structuredOutput", "schemaFile"), "structuredOutput.schemaFile"),
)


@dataclass(frozen=True)
class RefSite:
    """One hank ref and where it was written."""

    at: tuple[PathSegment, ...]
    """JSON path of the ref in the hank file, as segments."""
    raw: str
    """The ref exactly as written."""
    label: str
    """The field name used in messages (`promptFile`, `copy.from`, ...)."""
    kind: RefKind
    base: str = ""
    """Hank-relative directory the ref resolves from ("" is the hank directory itself)."""
    origin: str | None = None
    """For refs read from a sentinel config file: that file, relative to the hank directory."""

    @property
    def path(self) -> str:
        """JSON path of the ref, e.g. `hank[2].rigSetup[0].copy.from`."""
        return format_path(self.at)

    @property
    def relative(self) -> str:
        """The ref as a normalised path relative to the hank directory (may start with `..`)."""
        return posixpath.normpath(posixpath.join(self.base, self.raw))

    def resolve(self, hank_dir: Path) -> Path:
        """The absolute path the ref names (lexically: symlinks are not followed)."""
        return resolve_ref(hank_dir, self.raw, self.base)

    def issue(self, message: str) -> HankIssue:
        """An issue at this ref's JSON path; refs from a sentinel file name that file too."""
        if self.origin is not None:
            message = f'{self.label} in "{self.origin}": {message}'
        return HankIssue(self.path, message)


def resolve_ref(hank_dir: Path, raw: str, base: str = "") -> Path:
    """`hank_dir/base/raw`, normalised lexically. `hank_dir` must be absolute (no cwd fallback)."""
    if not hank_dir.is_absolute():
        raise ValueError(f"the hank directory must be an absolute path, got {hank_dir}")
    return Path(os.path.normpath(os.path.join(hank_dir, base, raw)))


# --------------------------------------------------------------------------------------------
# Finding the refs
# --------------------------------------------------------------------------------------------


def iter_hank_refs(hank: HankFile) -> Iterator[RefSite]:
    """Every ref written in the hank file, in document order.

    Includes the refs of inline sentinel configs, but not those inside sentinel config files
    (reading those needs the filesystem, see :func:`sentinel_file_refs`).
    """
    yield from _ref_list(
        ("globalSystemPromptFile",), hank.global_system_prompt_file, "system-prompt"
    )
    for site in hank.codon_sites():
        yield from codon_refs(site.codon, site.at)


def codon_refs(codon: Codon, at: tuple[PathSegment, ...]) -> Iterator[RefSite]:
    """The refs of one codon located at JSON path `at`."""
    yield from _ref_list((*at, "promptFile"), codon.prompt_file, "prompt")
    yield from _ref_list(
        (*at, "appendSystemPromptFile"), codon.append_system_prompt_file, "system-prompt"
    )
    for position, op in enumerate(codon.rig_setup or []):
        if isinstance(op, RigCopy):
            yield RefSite(
                (*at, "rigSetup", position, "copy", "from"),
                op.copy_.from_,
                "copy.from",
                "copy-source",
            )
    for position, sentinel in enumerate(codon.sentinels or []):
        where = (*at, "sentinels", position, "sentinelConfig")
        config = sentinel.sentinel_config
        if isinstance(config, str):
            yield RefSite(where, config, "sentinelConfig", "sentinel-config")
        else:
            yield from _sentinel_config_refs(config, where, base="", origin=None)


def _ref_list(
    at: tuple[PathSegment, ...], value: str | list[str] | None, kind: RefKind
) -> Iterator[RefSite]:
    label = str(at[-1])
    if isinstance(value, str):
        # A scalar "" means absent (docs/behaviour.md §1.10); an empty string inside an array is reported.
        if value:
            yield RefSite(at, value, label, kind)
    elif isinstance(value, list):
        for position, raw in enumerate(value):
            yield RefSite((*at, position), raw, label, kind)


def _sentinel_config_refs(
    config: Mapping[str, Any], at: tuple[PathSegment, ...], *, base: str, origin: str | None
) -> Iterator[RefSite]:
    for keys, label in _SENTINEL_CONFIG_REFS:
        value: Any = config
        for key in keys:
            value = value.get(key) if isinstance(value, Mapping) else None
        values = value if isinstance(value, list) else [value]
        for position, raw in enumerate(values):
            # Wrong types and empty strings are the sentinel config schema's business.
            if not (isinstance(raw, str) and raw):
                continue
            index: tuple[int, ...] = (position,) if isinstance(value, list) else ()
            if origin is None:
                yield RefSite((*at, *keys, *index), raw, label, "sentinel-file", base)
            else:
                # A file's refs are located at its sentinelConfig entry; the message names
                # the file and the field inside it.
                name = label + "".join(f"[{n}]" for n in index)
                yield RefSite(at, raw, name, "sentinel-file", base, origin)


def sentinel_file_refs(site: RefSite, hank_dir: Path) -> list[RefSite] | None:
    """The refs inside the sentinel config file `site` names, resolved from that file's directory.

    `None` when the file cannot be read as a JSON object (the existence pass reports that).
    """
    config = _read_json_object(site.resolve(hank_dir))
    if not isinstance(config, dict):
        return None
    relative = site.relative
    return list(
        _sentinel_config_refs(
            config,
            site.at,
            base=posixpath.dirname(relative),
            origin=relative,
        )
    )


def _read_json_object(path: Path) -> object:
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None


# --------------------------------------------------------------------------------------------
def raw_hank_refs(data: object) -> Iterator[RefSite]:
    """The refs of a hank file that did not validate, read from its raw JSON.

    Lets the preflight report symlink violations together with schema errors: whatever shape
    problems the file has, every string in a ref-bearing field is still a ref to check.
    """
    if not isinstance(data, dict):
        return
    yield from _raw_ref_values(("globalSystemPromptFile",), data.get("globalSystemPromptFile"),
                                "system-prompt")
    items = data.get("hank")
    for index, item in enumerate(items if isinstance(items, list) else []):
        if not isinstance(item, dict):
            continue
        codons = item.get("codons") if item.get("type") == "loop" else [item]
        for position, raw in enumerate(codons if isinstance(codons, list) else []):
            if not isinstance(raw, dict):
                continue
            at: tuple[PathSegment, ...] = (
                ("hank", index, "codons", position) if item.get("type") == "loop" else
                ("hank", index))
            yield from _raw_ref_values((*at, "promptFile"), raw.get("promptFile"), "prompt")
            yield from _raw_ref_values((*at, "appendSystemPromptFile"),
                                       raw.get("appendSystemPromptFile"), "system-prompt")
            rig = raw.get("rigSetup")
            for op_index, op in enumerate(rig if isinstance(rig, list) else []):
                source = op.get("copy", {}).get("from") if isinstance(op, dict) and isinstance(
                    op.get("copy"), dict) else None
                if isinstance(source, str):
                    yield RefSite((*at, "rigSetup", op_index, "copy", "from"), source,
                                  "copy.from", "copy-source")


def _raw_ref_values(at: tuple[PathSegment, ...], value: object,
                    kind: RefKind) -> Iterator[RefSite]:
    label = str(at[-1])
    if isinstance(value, str):
        yield RefSite(at, value, label, kind)
    elif isinstance(value, list):
        for position, entry in enumerate(value):
            if isinstance(entry, str):
                yield RefSite((*at, position), entry, label, kind)


# The policy pass (R1, R2, R3, copy trees)
# --------------------------------------------------------------------------------------------


def check_hank_refs(hank: HankFile, hank_dir: Path) -> list[HankIssue]:
    """Apply the strict-reference policy to every ref of `hank`; return all violations.

    Nothing is read but directory entries (`lstat`) and sentinel config files that already passed
    the policy, whose own refs are then checked from the config file's directory, still contained
    in the hank directory. Missing files are not reported here (see
    :func:`check_ref_files_exist`).
    """
    hank_dir = Path(os.path.abspath(hank_dir))
    anchor = Path(os.path.realpath(hank_dir))
    issues: list[HankIssue] = []
    for site in iter_hank_refs(hank):
        problem = ref_policy_problem(site, hank_dir, anchor)
        if problem is not None:
            issues.append(site.issue(problem))
            continue
        if site.kind == "copy-source":
            issues.extend(site.issue(message) for message in copy_tree_problems(site, anchor))
        elif site.kind == "sentinel-config":
            for inner in sentinel_file_refs(site, hank_dir) or []:
                inner_problem = ref_policy_problem(inner, hank_dir, anchor)
                if inner_problem is not None:
                    issues.append(inner.issue(inner_problem))
    return issues


def ref_policy_problem(site: RefSite, hank_dir: Path, anchor: Path | None = None) -> str | None:
    """The message for the first rule `site` breaks (R1, then R2, then R3), or `None`.

    `anchor` is `realpath(hank_dir)`, computed once by callers that check many refs.
    """
    problem = ref_spelling_problem(site, hank_dir)
    if problem is not None:
        return problem
    anchor = anchor if anchor is not None else Path(os.path.realpath(hank_dir))
    return _symlink_problem(site, anchor)


def ref_spelling_problem(site: RefSite, hank_dir: Path) -> str | None:
    """R1 and R2: the purely textual rules."""
    if site.raw == "":
        return f"{site.label} cannot be an empty string; omit the field instead"
    spelling = forbidden_ref_spelling(site.raw)
    if spelling is not None:
        return ref_spelling_message(spelling, site.raw)
    if escapes_base(site.relative):
        return (
            f'"{site.raw}" resolves outside the hank directory ({site.resolve(hank_dir)}); '
            "move the file into the hank directory"
        )
    return None


def _symlink_problem(site: RefSite, anchor: Path) -> str | None:
    """R3: walk the normalised path from the canonical hank directory, one `lstat` at a time."""
    relative = site.relative
    if relative == ".":
        return None
    parts = relative.split("/")
    current = anchor
    for depth, part in enumerate(parts):
        current = current / part
        component = "/".join(parts[: depth + 1])
        try:
            mode = os.lstat(current).st_mode
        except (FileNotFoundError, NotADirectoryError):
            # Missing files are the existence pass's business.
            return None
        except OSError as exc:
            return f'"{site.raw}" cannot be checked at "{component}": {exc.strerror or exc}'
        if stat.S_ISLNK(mode):
            return (
                f'"{site.raw}" passes through a symlink at "{component}"; '
                "symlinks are not allowed in hank refs"
            )
        if not stat.S_ISDIR(mode):
            return None
    return None


def copy_tree_problems(site: RefSite, anchor: Path) -> list[str]:
    """The copy-tree rule: every symlink or special file in the copied tree, sorted by name.

    Entries are named relative to the hank directory. A missing source is not reported here.
    """
    relative = site.relative
    if relative == ".":
        # Copying the hank directory itself is rejected by the existence pass.
        return []
    root = anchor / relative
    try:
        mode = os.lstat(root).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        return [f'"{site.raw}" cannot be checked: {exc.strerror or exc}']
    if stat.S_ISREG(mode):
        return []
    if not stat.S_ISDIR(mode):
        return [_special_message(site.raw, relative)]
    problems: list[str] = []
    _scan_tree(site.raw, root, relative, problems)
    return problems


def _scan_tree(raw: str, directory: Path, relative: str, problems: list[str]) -> None:
    try:
        entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
    except OSError as exc:
        problems.append(f'"{raw}" cannot be read at "{relative}": {exc.strerror or exc}')
        return
    for entry in entries:
        entry_relative = f"{relative}/{entry.name}"
        if entry.is_symlink():
            problems.append(
                f'"{raw}" contains a symlink at "{entry_relative}"; '
                "symlinks are not allowed anywhere in a copied tree"
            )
        elif entry.is_dir(follow_symlinks=False):
            _scan_tree(raw, Path(entry.path), entry_relative, problems)
        elif not entry.is_file(follow_symlinks=False):
            problems.append(_special_message(raw, entry_relative))


def _special_message(raw: str, entry: str) -> str:
    return (
        f'"{raw}" contains a non-regular file at "{entry}"; '
        "only regular files and directories can be copied"
    )


# --------------------------------------------------------------------------------------------
# The existence pass
# --------------------------------------------------------------------------------------------


def check_ref_files_exist(hank: HankFile, hank_dir: Path) -> list[HankIssue]:
    """Check that every ref names what it should; return all problems.

    Prompt and system prompt files (and files named by sentinel configs) must be readable
    regular files; copy sources must exist and not be the hank directory itself; sentinel config
    files must exist and hold a JSON object. Refs that break the textual rules are skipped:
    :func:`check_hank_refs` reports them, and they must never be read.
    """
    hank_dir = Path(os.path.abspath(hank_dir))
    issues: list[HankIssue] = []
    for site in iter_hank_refs(hank):
        if ref_spelling_problem(site, hank_dir) is not None:
            continue
        if site.kind == "copy-source":
            problem = _copy_source_problem(site, hank_dir)
        elif site.kind == "sentinel-config":
            problem = _sentinel_config_problem(site, hank_dir)
            if problem is None:
                for inner in sentinel_file_refs(site, hank_dir) or []:
                    if ref_spelling_problem(inner, hank_dir) is None:
                        inner_problem = _readable_file_problem(inner, hank_dir)
                        if inner_problem is not None:
                            issues.append(inner.issue(inner_problem))
        else:
            problem = _readable_file_problem(site, hank_dir)
        if problem is not None:
            issues.append(site.issue(problem))
    return issues


def _readable_file_problem(site: RefSite, hank_dir: Path) -> str | None:
    path = site.resolve(hank_dir)
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return f'"{site.raw}" does not exist ({path})'
    except OSError as exc:
        return f'"{site.raw}" is not readable: {exc.strerror or exc}'
    if not stat.S_ISREG(mode):
        return f'"{site.raw}" is not a regular file ({path})'
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        return f'"{site.raw}" is not readable: {exc.strerror or exc}'
    return None


def _copy_source_problem(site: RefSite, hank_dir: Path) -> str | None:
    path = site.resolve(hank_dir)
    if not os.path.lexists(path):
        return f'source path "{path}" does not exist'
    if path == hank_dir or os.path.realpath(path) == os.path.realpath(hank_dir):
        return (
            f'copy source "{site.raw}" is the hank directory itself; '
            "move the files into a subdirectory and copy that"
        )
    return None


def _sentinel_config_problem(site: RefSite, hank_dir: Path) -> str | None:
    problem = _readable_file_problem(site, hank_dir)
    if problem is not None:
        return problem
    path = site.resolve(hank_dir)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        return f'"{site.raw}" is not valid UTF-8'
    except json.JSONDecodeError as exc:
        return f'"{site.raw}" is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})'
    if not isinstance(data, dict):
        return f'"{site.raw}" must hold a JSON object (a sentinel config)'
    return None


def verify_hank_refs(hank: HankFile, hank_dir: Path, *, source: str = "hank.json") -> None:
    """Run the policy pass, then (only if it passed) the existence pass.

    Raises:
        HankValidationError: naming `source` and listing every problem of the failing pass.
    """
    issues = check_hank_refs(hank, hank_dir)
    if not issues:
        issues = check_ref_files_exist(hank, hank_dir)
    if issues:
        raise HankValidationError(source, issues)
