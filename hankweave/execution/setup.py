"""Execution directory setup: which directory a launch runs in, and preparing it (docs/behaviour.md §2.4, docs/behaviour.md §2.5).

Three tiers keep setup from damaging anything:

1. The managed root (`$HANKWEAVE_HOME`, else `$HANKWEAVE_RUNTIME_EXECUTION_BASE_DIR`, else
   `~/.hankweave-executions`) belongs to auto mode: `-e` may only point at an existing execution
   there. The test is a real path-prefix test (0.10.0 compared strings, so
   `~/.hankweave-executions2` counted as inside).
2. A directory that already holds execution state (`.hankweave/`) is never started over without
   `force`; with it, the state is set aside as `.hankweave.backup-<ts>` and `agentRoot/` wiped
   unless `no_wipe`.
3. A non-empty directory without `.hankweave/` is used only after confirmation (or `yes`).

Deliberate differences from Hankweave 0.10.0: tier 3 also applies to `-e` without `-n` (0.10.0
silently took over any existing directory there); a changed hank needs confirmation when auto
mode resumes, too; a resumed data link that points at an old data path is relinked; the
data-hash time limit comes from the settings instead of always being 5000 ms.

A new replay keeps a copy of its recording in `.hankweave/recording/` and takes its data and
hank from that copy, so the execution never depends on where the recording was opened.

Nothing prompts here: questions go through the request's `confirm` callback, and informational
messages are returned in :attr:`ExecutionSetup.notices` for the CLI to print.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shlex
import shutil
import stat
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hankweave.config.errors import ConfigError
from hankweave.execution.datahash import DEFAULT_TIME_LIMIT_MS, hash_data_source
from hankweave.execution.layout import ExecutionLayout
from hankweave.execution.meta import (
    ExecutionMeta,
    ExecutionMetaError,
    LinkType,
    current_environment,
    load_execution_meta,
    save_execution_meta,
)
from hankweave.fsutil import (
    PRIVATE_FILE_MODE,
    atomic_write_bytes,
    fsync_dir,
    private_dir,
    private_tree,
    utc_now_iso,
)
from hankweave.state.lock import LOCK_FILE_NAME, RuntimeLock, refuse_if_held

MANAGED_ROOT_NAME = ".hankweave-executions"
INPUT_CACHE_PATH = (".hankweave-cache", "inputs")
HANK_FILE_NAME = "hank.json"
STDIN_ARG = "-"
EMPTY_ARCHIVE_MANIFEST = b'{\n  "version": "1.0.0",\n  "entries": []\n}\n'
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


class ExecutionSetupError(ConfigError):
    """The execution directory cannot be chosen or prepared; the message says how to proceed."""


def decline(question: str) -> bool:
    """The answer of a non-interactive session to every confirmation: no."""
    return False


# --------------------------------------------------------------------------------------------
# Places
# --------------------------------------------------------------------------------------------


def managed_executions_root(env: Mapping[str, str] | None = None,
                            configured: str | None = None) -> Path:
    """Where auto mode keeps executions: `$HANKWEAVE_HOME`, else the resolved `executionBaseDir`
    setting (`configured`: `$HANKWEAVE_RUNTIME_EXECUTION_BASE_DIR`, 0.10.0's override, or
    `hankweave.json`'s key), else that variable, else `~/.hankweave-executions`."""
    env = os.environ if env is None else env
    for value in (env.get("HANKWEAVE_HOME", ""), configured or "",
                  env.get("HANKWEAVE_RUNTIME_EXECUTION_BASE_DIR", "")):
        if value.strip():
            return Path(os.path.abspath(os.path.expanduser(value.strip())))
    return Path.home() / MANAGED_ROOT_NAME


def default_input_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where `-i` text and stdin data are stored: `~/.hankweave-cache/inputs`, or
    `$HANKWEAVE_HOME/.cache/inputs` when `HANKWEAVE_HOME` is set (so tests never touch `~`)."""
    env = os.environ if env is None else env
    home = env.get("HANKWEAVE_HOME", "").strip()
    if home:
        return Path(os.path.abspath(os.path.expanduser(home))) / ".cache" / "inputs"
    return Path.home().joinpath(*INPUT_CACHE_PATH)


def is_within(path: Path, root: Path) -> bool:
    """Whether `path` is `root` or below it, compared component-wise both as written and with
    symlinks resolved (so neither `root2/` nor a symlinked spelling slips through)."""
    lexical = Path(os.path.abspath(path)).is_relative_to(os.path.abspath(root))
    return lexical or Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root))


# --------------------------------------------------------------------------------------------
# Inline data and paths (docs/behaviour.md §2.4)
# --------------------------------------------------------------------------------------------


def materialize_inline_data(
    text: str | bytes, cache_dir: Path, *, source: Literal["input", "stdin"] = "input"
) -> Path:
    """Store `-i` text (`source="input"`) or stdin data as a content-addressed file.

    The file is `<cache_dir>/<source>-<sha256[:16]>.txt`. It is written only when missing, so
    its mtime, and with it the data hash, stays the same for the same content.
    """
    data = text.encode("utf-8") if isinstance(text, str) else text
    path = cache_dir / f"{source}-{hashlib.sha256(data).hexdigest()[:16]}.txt"
    if not path.exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, data)
    return path


@dataclass(frozen=True)
class ResolvedPaths:
    """The data source and hank file of a launch."""

    data_path: Path
    hank_path: Path
    inline_data: bool = False
    """The data came from `-i` or stdin; it is always copied, never symlinked."""
    data_from_meta: bool = False
    """The data path was taken from the execution's (or replay's) metadata."""


def _absolute(cwd: Path, value: str | os.PathLike[str]) -> Path:
    return Path(os.path.abspath(os.path.join(cwd, os.path.expanduser(os.fspath(value)))))


def _meta_or_none(execution_dir: Path) -> ExecutionMeta | None:
    try:
        return load_execution_meta(ExecutionLayout(execution_dir).meta_file)
    except ExecutionMetaError:
        return None


def resolve_data_and_hank_paths(
    *,
    cwd: Path,
    hank_arg: str | os.PathLike[str] | None = None,
    data_arg: str | os.PathLike[str] | None = None,
    execution_arg: str | os.PathLike[str] | None = None,
    inline_text: str | None = None,
    stdin_text: str | bytes | None = None,
    cache_dir: Path | None = None,
    replay_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> ResolvedPaths:
    """Decide the data source and the hank file of a launch (docs/behaviour.md §2.4).

    Data, first match wins: `inline_text` (`-i`); `data_arg == "-"` (stdin, whose content the
    caller passes as `stdin_text`); `data_arg`; with `-e` and nothing explicit, the recorded
    data path of that execution if it still exists (likewise for a replay); else `cwd`.
    Hank: `hank_arg` (a directory means its `hank.json`); else the data directory's `hank.json`
    if present; else the replay's recorded hank; else, with `-e`, the hank that execution
    recorded if it still exists (ours: `hankweave run -e DIR` resumes from anywhere); else
    `cwd/hank.json`. Remote hanks must be
    fetched by the caller first. Existence of the hank file is not checked here.

    Raises:
        ExecutionSetupError: data is `-` but no stdin content was given.
    """
    cwd = Path(os.path.abspath(cwd))
    cache = cache_dir if cache_dir is not None else default_input_cache_dir(env)
    replay_meta = _meta_or_none(replay_dir) if replay_dir is not None else None
    data_path, inline, from_meta = _data_source(
        cwd, data_arg, execution_arg, inline_text, stdin_text, cache, replay_meta)
    hank_path = _hank_file(cwd, hank_arg, execution_arg, data_path, inline, replay_meta)
    return ResolvedPaths(data_path, hank_path, inline_data=inline, data_from_meta=from_meta)


def _data_source(
    cwd: Path,
    data_arg: str | os.PathLike[str] | None,
    execution_arg: str | os.PathLike[str] | None,
    inline_text: str | None,
    stdin_text: str | bytes | None,
    cache: Path,
    replay_meta: ExecutionMeta | None,
) -> tuple[Path, bool, bool]:
    """The data path of a launch, whether it is inline (`-i` or stdin) and whether it was
    taken from recorded metadata; the first rule of `resolve_data_and_hank_paths` that applies."""
    if inline_text is not None:
        return materialize_inline_data(inline_text, cache, source="input"), True, False
    if data_arg is not None and os.fspath(data_arg) == STDIN_ARG:
        if stdin_text is None:
            raise ExecutionSetupError(
                'No input provided on stdin. Use: echo "text" | hankweave hank.json -'
            )
        return materialize_inline_data(stdin_text, cache, source="stdin"), True, False
    if data_arg is not None:
        return _absolute(cwd, data_arg), False, False
    recorded = None
    if execution_arg is not None:
        recorded = _meta_or_none(_absolute(cwd, execution_arg))
    elif replay_meta is not None:
        recorded = replay_meta
    # Reusing the recorded path avoids a false data-hash mismatch when cwd has changed.
    if recorded is not None and os.path.exists(recorded.read_only_source_data_path):
        return Path(recorded.read_only_source_data_path), False, True
    return cwd, False, False


def _hank_file(
    cwd: Path,
    hank_arg: str | os.PathLike[str] | None,
    execution_arg: str | os.PathLike[str] | None,
    data_path: Path,
    inline: bool,
    replay_meta: ExecutionMeta | None,
) -> Path:
    """The hank file of a launch: the first rule of `resolve_data_and_hank_paths` that applies."""
    if hank_arg is not None:
        hank_path = _absolute(cwd, hank_arg)
        return hank_path / HANK_FILE_NAME if hank_path.is_dir() else hank_path
    if not inline and (data_path / HANK_FILE_NAME).is_file():
        return data_path / HANK_FILE_NAME
    if replay_meta is not None and replay_meta.hank_path:
        return Path(replay_meta.hank_path)
    recorded_hank = _recorded_hank(cwd, execution_arg)
    if recorded_hank is not None and not (cwd / HANK_FILE_NAME).is_file():
        return recorded_hank
    return cwd / HANK_FILE_NAME


def _recorded_hank(cwd: Path, execution_arg: str | os.PathLike[str] | None) -> Path | None:
    """The hank file the execution ``execution_arg`` recorded, if it still exists."""
    meta = _meta_or_none(_absolute(cwd, execution_arg)) if execution_arg is not None else None
    if meta is None or not meta.hank_path or not os.path.isfile(meta.hank_path):
        return None
    return Path(meta.hank_path)


# --------------------------------------------------------------------------------------------
# Setup (docs/behaviour.md §2.5)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SetupRequest:
    """What the launch asks for; field names follow the CLI flags."""

    data_path: Path
    """The data source (file or directory); made absolute against the process cwd."""
    hank_path: Path | None = None
    """The hank file, hashed to notice edits between runs."""
    execution_path: Path | None = None
    """`-e`: the execution directory; `None` lets auto mode choose under the managed root."""
    start_new: bool = False
    """`-n`: never resume; start a new execution."""
    force: bool = False
    """`-f`: accept a data change (relink), set existing state aside under `-n`, skip prompts."""
    yes: bool = False
    """`-y`: answer yes to confirmations."""
    no_wipe: bool = False
    """`--no-wipe`: with `-n -f`, keep the old `agentRoot/` instead of wiping it."""
    copy_data: bool = False
    """`--copy` (forced for `-i`/stdin data): copy the data instead of symlinking it."""
    ignore_data_mismatch: bool = False
    """Deprecated `--ignore-data-mismatch`, and replay: accept a data change like `force`."""
    data_hash_time_limit_ms: int = DEFAULT_TIME_LIMIT_MS
    """Time allowed for hashing a data directory (the resolved `dataHashTimeLimit`)."""
    confirm: Callable[[str], bool] = decline
    """Asks the user a yes/no question; the default answers no, as a non-interactive session."""
    managed_root: Path | None = None
    """Overrides :func:`managed_executions_root` (mainly for tests)."""
    env: Mapping[str, str] | None = None
    """Environment used to find the managed root; defaults to the process environment."""
    invocation_method: str = "python"
    """Recorded in the metadata's `environment.invocationMethod`."""
    recording: Path | None = None
    """A replay (with `start_new`): the folder of the opened recording, which holds the data and
    the hank it plays. The new execution keeps a copy as `.hankweave/recording/` and takes the
    data and the hank from that copy (hashed, linked and recorded there), so it can be resumed,
    inspected and exported once the recording's source is gone."""
    recording_source: str | None = None
    """A replay: the recording as the person named it (a file, a folder, a URL), recorded so
    listings can say what the execution replays."""
    hank_source: dict[str, Any] | None = None
    """Where the hank came from, when not a local hank directory: a bundle's ``bundleHash``
    and ``bundlePath``, a remote hank's ``remote`` (:meth:`HankSource.meta_fields`). Kept
    across resumes that run the same hank file."""


@dataclass(frozen=True)
class ExecutionSetup:
    """The prepared execution directory."""

    layout: ExecutionLayout
    data_source: Path
    data_hash: str
    hank_hash: str | None
    is_new: bool
    """A new execution (no state to resume)."""
    link_type: LinkType
    meta: ExecutionMeta
    hank_changed: bool = False
    """Resuming, and the hank file changed since the last run (the user confirmed)."""
    data_relinked: bool = False
    """The data link was recreated (data changed under `--force`, or the link was stale)."""
    backup_path: Path | None = None
    """Where `-n --force` set the previous `.hankweave/` aside."""
    notices: list[str] = field(default_factory=list)
    """Messages for the user (warnings, what was backed up or removed)."""
    hank_path: Path | None = None
    """The hank file as recorded in the metadata: for a new replay, the copy in the kept
    recording."""

    @property
    def is_resuming(self) -> bool:
        return not self.is_new

    @property
    def execution_path(self) -> Path:
        return self.layout.path

    @property
    def agent_root(self) -> Path:
        return self.layout.agent_root


@dataclass
class _Choice:
    path: Path
    is_new: bool
    previous: ExecutionMeta | None = None
    relink: bool = False
    hank_changed: bool = False
    backup_path: Path | None = None
    notices: list[str] = field(default_factory=list)


def compute_hank_hash(path: Path) -> str | None:
    """sha256 hex of the hank file's text; `None` when there is no such file.

    Raises:
        ExecutionSetupError: the path exists but is not a regular file (a FIFO would block).
    """
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISREG(info.st_mode):
        raise ExecutionSetupError(
            f"Hank file {path} is not a regular file. Point hankweave at a hank.json file, or "
            "at a directory that contains one."
        )
    return hashlib.sha256(path.read_bytes()).hexdigest()


def find_execution_dirs(data_hash: str, managed_root: Path) -> list[Path]:
    """Executions under the managed root recorded with `data_hash`, newest first.

    Directory names start with a millisecond timestamp, so sorting names in descending order
    puts the newest first. Directories with unreadable metadata are skipped.
    """
    try:
        candidates = [entry for entry in os.scandir(managed_root) if entry.is_dir()]
    except FileNotFoundError:
        return []
    found = []
    for entry in candidates:
        meta = _meta_or_none(Path(entry.path))
        if meta is not None and meta.data_hash == data_hash:
            found.append(Path(entry.path))
    return sorted(found, key=str, reverse=True)


def find_execution_dir_for_resume(data_hash: str, managed_root: Path) -> Path | None:
    """The execution auto mode resumes for `data_hash`: the newest matching one, if any."""
    found = find_execution_dirs(data_hash, managed_root)
    return found[0] if found else None


def setup_execution(request: SetupRequest) -> ExecutionSetup:
    """Choose and prepare the execution directory of a launch (docs/behaviour.md §2.5).

    Hashes the data source and the hank, picks the directory (explicit `-e`, or auto mode under
    the managed root), applies the safety tiers, then creates `agentRoot/`, `rigArchive/`, the
    data link, `.hankweave/` with `archive-manifest.json` and `logs/`, and writes
    `execution-meta.json`.

    Raises:
        ExecutionSetupError: a safety rule refused, the user declined, or the data source or
            directory is unusable; the message says what, where and how to proceed.
    """
    data = Path(os.path.abspath(request.data_path))
    try:
        data_info = os.stat(data)
    except (FileNotFoundError, NotADirectoryError):
        raise ExecutionSetupError(
            f"Data source not found: {data}. Pass an existing file or directory as the data "
            "path (or --data), or run from the directory that holds the data."
        ) from None
    if not (stat.S_ISDIR(data_info.st_mode) or stat.S_ISREG(data_info.st_mode)):
        raise ExecutionSetupError(
            f"Data source is not a file or directory: {data}. Pass a regular file or a directory."
        )
    if request.recording is not None and not request.start_new:
        raise ValueError("a recording is kept only by a new execution (start_new)")
    data_hash = hash_data_source(data, request.data_hash_time_limit_ms)
    hank_hash = compute_hank_hash(request.hank_path) if request.hank_path is not None else None
    root = request.managed_root or managed_executions_root(request.env)
    root = Path(os.path.abspath(root))

    if request.execution_path is not None:
        path = Path(os.path.abspath(request.execution_path))
        choice = _choose_explicit(request, path, data, data_hash, hank_hash, root)
    else:
        choice = _choose_auto(request, data_hash, hank_hash, root)
    return _prepare(request, choice, data, data_info, data_hash, hank_hash)


def _choose_explicit(
    request: SetupRequest,
    path: Path,
    data: Path,
    data_hash: str,
    hank_hash: str | None,
    root: Path,
) -> _Choice:
    layout = ExecutionLayout(path)
    if is_within(path, root) and not layout.meta_file.is_file():
        raise ExecutionSetupError(
            f"Cannot create a new execution in {root}: this location is reserved for "
            f"auto-managed executions, and {path} holds no execution to resume. Options: leave "
            "out -e to let hankweave create one there; or pass -e with a directory outside it."
        )
    if path == data or os.path.realpath(path) == os.path.realpath(data):
        raise ExecutionSetupError(
            f"Execution directory cannot be the same as the data source: {path}. Pass -e with "
            "another directory; the data is linked into it as agentRoot/read_only_data_source."
        )
    for ancestor in path.parents:
        if ExecutionLayout(ancestor).meta_file.is_file():
            raise ExecutionSetupError(
                f"Cannot create an execution inside another execution directory: {path} is "
                f"inside {ancestor}. Pass -e with a directory outside it."
            )
    if os.path.lexists(path) and not path.is_dir():
        raise ExecutionSetupError(
            f"Execution path is not a directory: {path}. Pass -e with a directory (it is "
            "created if missing)."
        )

    if layout.fork_marker.is_file() and not layout.meta_file.is_file():
        raise ExecutionSetupError(
            f"{path} is a fork that was stopped while it was being made (docs/fork.md): it is "
            "no execution yet. Make it again with `hankweave fork -e SRC --at CODON -o "
            f"{shlex.quote(str(path))}` (it starts over), or remove the directory."
        )
    if request.start_new:
        return _choose_fresh_start(request, layout)
    if not path.exists():
        path.mkdir(parents=True)
        return _Choice(path, is_new=True, notices=[f"Created execution directory: {path}"])
    if layout.meta_file.is_file():
        return _resume(request, layout, data_hash, hank_hash)
    if not layout.hankweave_dir.exists():
        _confirm_non_empty(request, path)
    return _Choice(path, is_new=True)


def _choose_fresh_start(request: SetupRequest, layout: ExecutionLayout) -> _Choice:
    """`-e <path> -n`: a new execution in that directory, whatever it holds (tiers 2 and 3)."""
    path = layout.path
    if not path.exists():
        path.mkdir(parents=True)
        return _Choice(path, is_new=True, notices=[f"Created execution directory: {path}"])
    if not any(path.iterdir()):
        return _Choice(path, is_new=True)
    if not os.path.lexists(layout.hankweave_dir):
        _confirm_non_empty(request, path)
        return _Choice(path, is_new=True)
    # A live runtime works in this directory: refused as a second `run` is (LockHeldError).
    refuse_if_held(layout.hankweave_dir)
    if not request.force:
        raise ExecutionSetupError(
            f"Directory already contains execution state: {layout.hankweave_dir}. Options: "
            f"resume it by leaving out -n (hankweave run -e {shlex.quote(str(path))}); start"
            " fresh and back the state up to .hankweave.backup-<timestamp> with -n --force (add"
            " --no-wipe to keep agentRoot/); or pass -e with a different directory."
        )
    backup = _backup_state(layout)
    choice = _Choice(path, is_new=True, backup_path=backup)
    choice.notices.append(f"Backed up existing execution state to: {backup}")
    if request.no_wipe:
        choice.notices.append(
            f"Kept {layout.agent_root} (--no-wipe); its files enter the first checkpoint."
        )
    elif os.path.lexists(layout.agent_root):
        remove_tree(layout.agent_root)
        choice.notices.append(f"Removed the previous {layout.agent_root}")
    return choice


def _backup_state(layout: ExecutionLayout) -> Path:
    # ISO time with ':' and '.' made file-name safe, to the second: 2026-01-02T03-04-05.
    stamp = utc_now_iso().replace(":", "-").replace(".", "-")[:19]
    backup = layout.backup_dir(stamp)
    suffix = 1
    while os.path.lexists(backup):
        suffix += 1
        backup = layout.backup_dir(f"{stamp}-{suffix}")
    # Held across the move, so a runtime starting meanwhile is refused rather than moved aside
    # (acquire raises LockHeldError for a live holder and reclaims a stale lock).
    lock = RuntimeLock(layout.hankweave_dir)
    lock.acquire()
    try:
        os.rename(layout.hankweave_dir, backup)
    except BaseException:
        lock.release()
        raise
    # The lock moved with the state; it guarded only the move.
    (backup / LOCK_FILE_NAME).unlink(missing_ok=True)
    return backup


def _confirm_non_empty(request: SetupRequest, path: Path) -> None:
    """Tier 3: a non-empty directory that holds no execution is used only when confirmed."""
    entries = list(os.scandir(path))
    if not entries:
        return
    directories = sum(1 for entry in entries if entry.is_dir(follow_symlinks=False))
    files = len(entries) - directories
    summary = f"{path} is not empty ({files} files, {directories} directories)"
    if request.yes or request.force:
        return
    question = (
        f"WARNING: {summary} and holds no hankweave execution. Agents will be able to read and "
        f"modify files in it; hankweave will add .hankweave/, agentRoot/ and rigArchive/. "
        "Always use version control, and test hanks on non-critical directories first.\n"
        "Continue?"
    )
    if not request.confirm(question):
        raise ExecutionSetupError(
            f"Operation cancelled: {summary} and using it was not confirmed. Options: confirm "
            "when asked, or pass -y to use it anyway; or pass -e with an empty or new directory."
        )


def _resume(
    request: SetupRequest, layout: ExecutionLayout, data_hash: str, hank_hash: str | None
) -> _Choice:
    try:
        previous = load_execution_meta(layout.meta_file)
    except ExecutionMetaError as exc:
        raise ExecutionSetupError(
            f"{exc}. Options: repair or remove that file; or start a new execution in "
            f"{layout.path} with -n --force (the old state is backed up)."
        ) from None
    choice = _Choice(layout.path, is_new=False, previous=previous)
    if previous.data_hash != data_hash:
        if not (request.force or request.ignore_data_mismatch):
            raise ExecutionSetupError(
                f"Data source has changed since this execution was created "
                f"(execution {layout.path}, expected data hash {previous.data_hash}, current "
                f"{data_hash}). Options: use the new data with this execution's state:"
                f" --ignore-data-mismatch (or --force); "
                f"start fresh in this directory: -n --force; or leave out -e to let hankweave "
                "find or create a matching execution."
            )
        choice.relink = True
        choice.notices.append(
            f"Data source changed (expected hash {previous.data_hash}, current {data_hash}); "
            "continuing with the new data because of "
            f"{'--force' if request.force else '--ignore-data-mismatch'}."
        )
    if hank_hash is not None and previous.hank_hash and previous.hank_hash != hank_hash:
        choice.hank_changed = True
        change = (
            f"WARNING: hank.json has changed since the last run of {layout.path} "
            f"(previous {previous.hank_hash[:12]}..., current {hank_hash[:12]}...). "
            "Changes may affect how the execution continues."
        )
        asked = not (request.yes or request.force)
        if asked and not request.confirm(f"{change}\nContinue with modified config?"):
            raise ExecutionSetupError(
                f"Operation cancelled: hank.json has changed since the last run of "
                f"{layout.path}. Options: confirm when asked, or pass -y to continue with "
                "the modified hank; or pass -n to start a new execution."
            )
        choice.notices.append(change)
    return choice


def _choose_auto(
    request: SetupRequest, data_hash: str, hank_hash: str | None, root: Path
) -> _Choice:
    root.mkdir(parents=True, exist_ok=True)
    if not request.start_new:
        existing = find_execution_dir_for_resume(data_hash, root)
        if existing is not None:
            choice = _resume(request, ExecutionLayout(existing), data_hash, hank_hash)
            choice.notices.insert(0, f"Resuming execution in: {existing}")
            return choice
    path = _new_managed_dir(root, data_hash)
    return _Choice(path, is_new=True, notices=[f"Created execution directory: {path}"])


def _new_managed_dir(root: Path, data_hash: str) -> Path:
    """`<ms timestamp>-<4 base36 chars>-<dataHash[:6]>`, created exclusively."""
    while True:
        suffix = "".join(secrets.choice(_BASE36) for _ in range(4))
        path = root / f"{int(time.time() * 1000)}-{suffix}-{data_hash[:6]}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path


def _prepare(
    request: SetupRequest,
    choice: _Choice,
    data: Path,
    data_info: os.stat_result,
    data_hash: str,
    hank_hash: str | None,
) -> ExecutionSetup:
    layout = ExecutionLayout(choice.path)
    notices = list(choice.notices)
    layout.agent_root.mkdir(parents=True, exist_ok=True)
    layout.rig_archive.mkdir(parents=True, exist_ok=True)

    previous = choice.previous
    hank_path = Path(os.path.abspath(request.hank_path)) if request.hank_path else None
    recording = previous.recording if previous is not None else None
    recording_source = previous.recording_source if previous is not None else None
    if request.recording is not None:
        recording_source = request.recording_source
        data, hank_path = _keep_recording(request.recording, layout, data, hank_path)
        data_info = os.stat(data)
        data_hash = hash_data_source(data, request.data_hash_time_limit_ms)
        recording = layout.recording_dir.relative_to(layout.path).as_posix()
    link_type, relink = _place_data_link(request, choice, layout, data, data_info, notices)
    _ensure_private_state(layout)
    now = utc_now_iso()
    meta = ExecutionMeta(
        read_only_source_data_path=str(data),
        read_only_source_resolved_data_path=os.path.realpath(data),
        data_hash=data_hash,
        hank_hash=hank_hash,
        hank_path=str(hank_path) if hank_path is not None else None,
        link_type=link_type,
        created_at=previous.created_at if previous is not None else now,
        last_used=now,
        environment=current_environment(request.invocation_method),
        recording=recording,
        recording_source=recording_source,
        forked_from=previous.forked_from if previous is not None else None,
    )
    meta = meta.model_copy(update=_hank_source(request, previous, hank_path))
    save_execution_meta(layout.meta_file, meta)
    return ExecutionSetup(
        layout=layout,
        data_source=data,
        data_hash=data_hash,
        hank_hash=hank_hash,
        is_new=choice.is_new,
        link_type=link_type,
        meta=meta,
        hank_changed=choice.hank_changed,
        data_relinked=relink and not choice.is_new,
        backup_path=choice.backup_path,
        notices=notices,
        hank_path=hank_path,
    )


def _place_data_link(
    request: SetupRequest,
    choice: _Choice,
    layout: ExecutionLayout,
    data: Path,
    data_info: os.stat_result,
    notices: list[str],
) -> tuple[LinkType, bool]:
    """Link (or copy) the data into the execution when it is new, asked to relink, or its link
    is missing or points elsewhere; return the link type and whether an old link was replaced.
    Notices about the link are appended to `notices`."""
    relink = choice.relink
    stale_link = (
        not relink
        and not choice.is_new
        and os.path.lexists(layout.data_link)
        and not _link_points_at(layout.data_link, data)
    )
    if stale_link:
        relink = True
        notices.append(f"Relinked {layout.data_link} to the current data path {data}")
    if choice.is_new or relink or not os.path.lexists(layout.data_link):
        link_type, link_notice = _link_data(
            data, stat.S_ISDIR(data_info.st_mode), layout.data_link, copy=request.copy_data
        )
        if link_notice:
            notices.append(link_notice)
    else:
        previous = choice.previous
        link_type = previous.link_type if previous is not None else _detect_link_type(layout)
    return link_type, relink


def _ensure_private_state(layout: ExecutionLayout) -> None:
    """The `.hankweave/` and logs folders, private, and an archive manifest if none yet."""
    private_dir(layout.hankweave_dir, tighten=True)  # docs/state.md, "File modes"
    private_dir(layout.logs_dir)
    if not layout.archive_manifest.exists():
        atomic_write_bytes(layout.archive_manifest, EMPTY_ARCHIVE_MANIFEST,
                           mode=PRIVATE_FILE_MODE)


def _keep_recording(
    recording: Path, layout: ExecutionLayout, data: Path, hank: Path | None
) -> tuple[Path, Path | None]:
    """Copy a replay's recording into the new execution as `.hankweave/recording/`; return
    where the data and the hank are in the copy (a path from outside the recording stays)."""
    source = Path(os.path.abspath(recording))
    kept = layout.recording_dir
    private_dir(layout.hankweave_dir, tighten=True)

    def ignore(directory: str, names: list[str]) -> list[str]:
        # An execution made inside the recording's folder must not copy itself into itself.
        inside = [name for name in names if Path(directory, name) == layout.path]
        return _special_files(directory, names) + inside

    # Copied under another name, then renamed: the execution never holds half a recording.
    partial = kept.with_name(f"{kept.name}.partial-{os.getpid()}")
    if os.path.lexists(partial):
        remove_tree(partial)
    shutil.copytree(source, partial, symlinks=True, ignore=ignore)
    private_tree(partial)  # the copy keeps the sender's modes otherwise
    os.replace(partial, kept)
    fsync_dir(layout.hankweave_dir)

    def in_copy(path: Path) -> Path:
        return kept / path.relative_to(source) if path.is_relative_to(source) else path

    return in_copy(data), in_copy(hank) if hank is not None else None


# --------------------------------------------------------------------------------------------
# The data link
# --------------------------------------------------------------------------------------------


def _link_points_at(link: Path, data: Path) -> bool:
    """Whether an existing symlinked data link still names `data` (copies are not checked)."""
    target = link
    if not link.is_symlink() and link.is_dir() and not data.is_dir():
        target = link / data.name
        if not os.path.lexists(target):
            return False
    if not target.is_symlink():
        return True
    return os.path.abspath(os.path.join(target.parent, os.readlink(target))) == str(data)


def _detect_link_type(layout: ExecutionLayout) -> LinkType:
    link = layout.data_link
    if link.is_symlink():
        return "symlink"
    if link.is_dir() and any(entry.is_symlink() for entry in os.scandir(link)):
        return "symlink"
    return "copy"


def _link_data(
    source: Path, is_dir: bool, link: Path, *, copy: bool
) -> tuple[LinkType, str | None]:
    """Make `link` show the data: a symlink, or a copy when asked or when symlinking fails.

    A file source goes into a directory at `link`, under its own name.
    """
    if os.path.lexists(link):
        remove_tree(link)
    notice = None
    if is_dir:
        target = link
    else:
        link.mkdir(parents=True)
        target = link / source.name
    if not copy:
        try:
            os.symlink(source, target, target_is_directory=is_dir)
            return "symlink", None
        except OSError as exc:
            notice = f"Could not symlink the data ({exc.strerror or exc}); copying it instead."
    if is_dir:
        shutil.copytree(source, target, symlinks=True, ignore=_special_files)
    else:
        shutil.copy2(source, target)
    return "copy", notice


def _special_files(directory: str, names: list[str]) -> list[str]:
    """copytree filter: FIFOs, sockets and devices are skipped (copying a FIFO would block)."""
    skipped = []
    for name in names:
        mode = os.lstat(os.path.join(directory, name)).st_mode
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            skipped.append(name)
    return skipped


def remove_tree(path: Path) -> None:
    """Remove a file, symlink or directory tree, making read-only directories writable first."""
    if path.is_symlink() or not path.is_dir():
        path.unlink()
        return

    def retry_writable(function: Callable[..., object], failed: str, _exc: object) -> None:
        # A copied read-only data tree has read-only directories; make the parent writable.
        parent = os.path.dirname(failed)
        os.chmod(parent, os.stat(parent).st_mode | stat.S_IWUSR | stat.S_IXUSR)
        function(failed)

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=retry_writable)
    else:
        shutil.rmtree(path, onerror=retry_writable)


_SOURCE_FIELDS = ("bundle_hash", "bundle_path", "remote")


def _hank_source(request: SetupRequest, previous: ExecutionMeta | None,
                 hank_path: Path | None) -> dict[str, Any]:
    """The hank-source fields of the new metadata: this launch's, else the previous ones when
    the same hank file runs again (``run -e DIR`` of a bundle or remote run)."""
    if request.hank_source:
        return dict(request.hank_source)
    if previous is None or hank_path is None or previous.hank_path != str(hank_path):
        return {}
    return {name: getattr(previous, name) for name in _SOURCE_FIELDS}
