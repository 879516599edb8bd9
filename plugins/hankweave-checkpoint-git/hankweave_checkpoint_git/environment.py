"""The environment every git process of the backend runs in: this repository and nothing else.

:func:`git_environment` overrides every variable that could point git at another repository,
index, object store, configuration or attribute source, so a runtime started from inside a git
hook (which exports ``GIT_DIR`` and ``GIT_INDEX_FILE``) still only touches the shadow
repository, and gives every process the :data:`SAFE_CONFIG` with command-line scope.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from hankweave_checkpoint_git.owned import IDENTITY_EMAIL, IDENTITY_NAME

SAFE_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", os.devnull),
    ("core.fsmonitor", "false"),
    ("core.attributesFile", os.devnull),
    ("core.untrackedCache", "false"),
    ("core.pager", "cat"),  # git's own name for "no pager"
    ("core.editor", ":"),  # the shell's no-op: git runs an editor through the shell
    ("sequence.editor", ":"),
    ("core.askPass", ""),
    ("core.sshCommand", ":"),
    ("credential.helper", ""),  # an empty value empties the list of helpers
    ("protocol.allow", "never"),  # no transport at all: no ssh, no remote helper, no fetch
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("log.showSignature", "false"),  # gpg.program only runs to sign or to verify
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
)
"""Configuration every git process gets with command-line scope (``GIT_CONFIG_COUNT``), which
outranks the repository's own ``config`` and every file it includes: whatever those say, no
hook, file-system monitor, attributes file, pager, editor, password prompt, ssh command,
credential helper, transport, signing program or background maintenance runs."""

_DRIVER_OVERRIDES: dict[str, tuple[tuple[str, str], ...]] = {
    "filter": (("clean", ""), ("smudge", ""), ("process", ""), ("required", "false")),
    "diff": (("command", ""), ("textconv", ""), ("cachetextconv", "false")),
    "merge": (("driver", ""),),
}
"""For each filter, diff or merge driver the repository's configuration defines, the values
that take its programs away (git runs no filter whose command is empty)."""

NO_PROGRAMS_IN_DIFFS = ("--no-ext-diff", "--no-textconv")
"""Passed to every command that compares trees or files: no external diff, no textconv."""


def command_line_config(pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    """``pairs`` as ``GIT_CONFIG_COUNT``/``KEY_<n>``/``VALUE_<n>`` variables: configuration
    with command-line scope (git 2.31+), without touching the argument list."""
    env = {"GIT_CONFIG_COUNT": str(len(pairs))}
    for number, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{number}"] = key
        env[f"GIT_CONFIG_VALUE_{number}"] = value
    return env


def driver_overrides(drivers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The :data:`_DRIVER_OVERRIDES` of each ``(section, name)`` driver."""
    return [(f"{section}.{name}.{key}", value)
            for section, name in sorted(set(drivers))
            for key, value in _DRIVER_OVERRIDES[section]]


def driver_names(listed: bytes) -> set[tuple[str, str]]:
    """The filter, diff and merge drivers named in ``git config --list --name-only -z``
    output (sections and keys come lower-cased; a driver's name may hold dots)."""
    found = set()
    for entry in listed.split(b"\0"):
        section, _, rest = os.fsdecode(entry).strip().partition(".")
        name, dot, _ = rest.rpartition(".")
        if section in _DRIVER_OVERRIDES and dot and name:
            found.add((section, name))
    return found


def may_define_drivers(config: bytes) -> bool:
    """Whether a config's bytes could define a driver or include a file that does: git
    spells section names literally (any letter case, no escapes), so a config without these
    words defines none, and listing it (one more git process) can be skipped."""
    lowered = config.lower()
    return any(word in lowered for word in (b"filter", b"diff", b"merge", b"include"))


def git_environment(git_dir: Path, work_tree: Path | None, home: Path, ceiling: Path,
                    drivers: Iterable[tuple[str, str]] = ()) -> dict[str, str]:
    """The variables every call sets: this repository, no outside configuration, and the
    :data:`SAFE_CONFIG` (plus the overrides that empty each of ``drivers``, pairs of
    section and driver name) with command-line scope."""
    return {
        **command_line_config([*SAFE_CONFIG, *driver_overrides(drivers)]),
        "GIT_DIR": str(git_dir),
        **({"GIT_WORK_TREE": str(work_tree)} if work_tree is not None else {}),
        "GIT_COMMON_DIR": str(git_dir),
        "GIT_INDEX_FILE": str(git_dir / "index"),
        "GIT_OBJECT_DIRECTORY": str(git_dir / "objects"),
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": "",
        "GIT_GRAFT_FILE": str(git_dir / "info" / "grafts"),
        "GIT_SHALLOW_FILE": str(git_dir / "shallow"),
        "GIT_NAMESPACE": "",
        "GIT_NO_REPLACE_OBJECTS": "1",
        "GIT_CEILING_DIRECTORIES": str(ceiling),
        "GIT_DISCOVERY_ACROSS_FILESYSTEM": "0",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home),
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_SYSTEM": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_PARAMETERS": "",
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_TEMPLATE_DIR": "",
        "GIT_DEFAULT_HASH": "sha1",
        "GIT_DEFAULT_REF_FORMAT": "files",
        "GIT_LITERAL_PATHSPECS": "1",
        "GIT_GLOB_PATHSPECS": "0",
        "GIT_NOGLOB_PATHSPECS": "0",
        "GIT_ICASE_PATHSPECS": "0",
        "GIT_TERMINAL_PROMPT": "0",
        # The caller's own variables outrank the configuration; these are git's "none".
        "GIT_PAGER": "cat",
        "GIT_EDITOR": ":",
        "GIT_SEQUENCE_EDITOR": ":",
        "GIT_ASKPASS": "",
        "SSH_ASKPASS": "",
        "GIT_AUTHOR_NAME": IDENTITY_NAME,
        "GIT_AUTHOR_EMAIL": IDENTITY_EMAIL,
        "GIT_COMMITTER_NAME": IDENTITY_NAME,
        "GIT_COMMITTER_EMAIL": IDENTITY_EMAIL,
    }
