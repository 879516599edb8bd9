"""Execution directories: layout, data hashing, metadata, path resolution and the safety tiers."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from hankweave.config import ConfigError
from hankweave.execution import (
    ExecutionLayout,
    ExecutionSetupError,
    SetupRequest,
    datahash,
    find_execution_dir_for_resume,
    hash_data_source,
    is_within,
    load_execution_meta,
    managed_executions_root,
    materialize_inline_data,
    resolve_data_and_hank_paths,
    setup_execution,
)
from hankweave.execution import setup as execution_setup
from hankweave.execution.setup import compute_hank_hash, default_input_cache_dir

# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def managed_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own managed root: nothing touches the real home directory."""
    root = tmp_path / "managed"
    monkeypatch.setenv("HANKWEAVE_HOME", str(root))
    monkeypatch.delenv("HANKWEAVE_RUNTIME_EXECUTION_BASE_DIR", raising=False)
    return root


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    for name in ("a.txt", "b.txt", "c.txt", "d.txt", "e.txt"):
        (data / name).write_text(name)
    return data


@pytest.fixture
def hank_file(tmp_path: Path) -> Path:
    path = tmp_path / "project" / "hank.json"
    path.parent.mkdir()
    path.write_text('{"hank": []}\n')
    return path


@pytest.fixture
def request_for(data_dir: Path, hank_file: Path) -> Callable[..., SetupRequest]:
    def make(**fields: Any) -> SetupRequest:
        return SetupRequest(data_path=data_dir, hank_path=hank_file, **fields)

    return make


class Asked:
    """A confirm callback that records the questions and gives a fixed answer."""

    def __init__(self, answer: bool) -> None:
        self.answer = answer
        self.questions: list[str] = []

    def __call__(self, question: str) -> bool:
        self.questions.append(question)
        return self.answer


def touch_later(path: Path, seconds: float = 10) -> None:
    info = path.stat()
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + int(seconds * 1e9)))


# --- layout -----------------------------------------------------------------------------------


def test_layout_names_every_path_of_an_execution_directory(tmp_path: Path) -> None:
    layout = ExecutionLayout(tmp_path / "exec")
    base = tmp_path / "exec"
    hw = base / ".hankweave"

    assert layout.agent_root == base / "agentRoot"
    assert layout.data_link == base / "agentRoot" / "read_only_data_source"
    assert layout.rig_archive == base / "rigArchive"
    assert layout.hankweave_dir == hw
    assert layout.state_file == hw / "state.json"
    assert layout.state_backup_file == hw / "state.json.bak"
    assert layout.events_file == hw / "events" / "events.jsonl"
    assert layout.runs_dir == hw / "runs"
    assert layout.run_folder("run-1") == hw / "runs" / "run-1"
    assert (
        layout.codon_log_path("run-1", "review#2") == hw / "runs" / "run-1" / "review-2-claude.log"
    )
    assert layout.checkpoints_dir == hw / "checkpoints"
    assert layout.logs_dir == hw / "logs"
    assert layout.server_log == hw / "logs" / "server.log"
    assert layout.meta_file == hw / "execution-meta.json"
    assert layout.archive_manifest == hw / "archive-manifest.json"
    assert layout.lock_file == hw / "runtime.lock"
    assert layout.sentinels_dir == hw / "sentinels"
    assert layout.recording_dir == hw / "recording"


def test_layout_paths_are_absolute(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)

    assert ExecutionLayout(Path("rel")).path == tmp_path / "rel"


# --- data hashing -----------------------------------------------------------------------------


def test_file_hash_covers_name_size_mtime_and_content(tmp_path: Path) -> None:
    path = tmp_path / "input.txt"
    path.write_bytes(b"hello")
    os.utime(path, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))

    expected = hashlib.sha256(b"file:input.txt:5:1700000000000" + b"hello").hexdigest()[:12]

    assert hash_data_source(path) == expected


def test_file_hash_changes_with_mtime(tmp_path: Path) -> None:
    path = tmp_path / "input.txt"
    path.write_text("same")
    before = hash_data_source(path)

    touch_later(path)

    assert hash_data_source(path) != before


def test_directory_hash_is_stable_and_twelve_hex_chars(data_dir: Path) -> None:
    first = hash_data_source(data_dir)

    assert re.fullmatch(r"[0-9a-f]{12}", first)
    assert hash_data_source(data_dir) == first


def test_directory_hash_changes_when_a_file_is_touched_or_added(data_dir: Path) -> None:
    before = hash_data_source(data_dir)
    touch_later(data_dir / "a.txt")
    touched = hash_data_source(data_dir)
    (data_dir / "new.txt").write_text("n")

    assert len({before, touched, hash_data_source(data_dir)}) == 3


def test_directory_hash_ignores_hidden_and_build_directories(data_dir: Path) -> None:
    before = hash_data_source(data_dir)
    for name in (".git", "node_modules", "__pycache__", "dist", "build"):
        (data_dir / name).mkdir()
        (data_dir / name / "x").write_text("x")

    assert hash_data_source(data_dir) == before


def test_directory_hash_only_sees_the_first_hundred_items(tmp_path: Path) -> None:
    data = tmp_path / "many"
    data.mkdir()
    for n in range(101):
        (data / f"f{n:03d}").write_text("x")
    before = hash_data_source(data)

    (data / "f100").write_text("longer content")  # the 101st item, beyond the limit

    assert hash_data_source(data) == before
    (data / "f000").write_text("longer content")
    assert hash_data_source(data) != before


def test_small_directories_include_their_path_in_the_hash(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    for directory in (one, two):
        directory.mkdir()
        (directory / "f").write_text("x")
        os.utime(directory / "f", ns=(0, 1_000_000_000_000_000_000))

    assert hash_data_source(one) != hash_data_source(two)


def test_scan_past_the_time_limit_records_a_timeout_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "slow"
    (data / "sub").mkdir(parents=True)
    (data / "sub" / "deep.txt").write_text("x")
    ticks: Iterator[float] = iter([0.0, 0.0, 10.0, 10.0])
    monkeypatch.setattr(datahash.time, "monotonic", lambda: next(ticks))

    mtime = (data / "sub").stat().st_mtime_ns // 1_000_000_000
    entries = [f"d:sub:{mtime}", "TIMEOUT:scan_truncated", f"path:{data}"]
    expected = hashlib.sha256("\n".join(entries).encode()).hexdigest()[:12]

    assert hash_data_source(data, time_limit_ms=1) == expected


# --- places and inline data -------------------------------------------------------------------


def test_managed_root_comes_from_hankweave_home(managed_root: Path) -> None:
    assert managed_executions_root() == managed_root
    assert managed_executions_root({"HANKWEAVE_RUNTIME_EXECUTION_BASE_DIR": "/base"}) == Path(
        "/base"
    )


def test_is_within_is_a_path_prefix_test_not_a_string_prefix(tmp_path: Path) -> None:
    root = tmp_path / "root"

    assert is_within(root / "a" / "b", root)
    assert is_within(root, root)
    assert not is_within(tmp_path / "root2" / "a", root)


def test_inline_text_is_stored_once_under_its_content_hash(tmp_path: Path) -> None:
    cache = tmp_path / "cache"

    path = materialize_inline_data("summarise this", cache)
    os.utime(path, ns=(0, 1_000_000_000))
    again = materialize_inline_data("summarise this", cache)

    digest = hashlib.sha256(b"summarise this").hexdigest()[:16]
    assert path == again == cache / f"input-{digest}.txt"
    assert path.read_text() == "summarise this"
    assert path.stat().st_mtime_ns == 1_000_000_000  # not rewritten, so the data hash is stable


def test_stdin_data_gets_its_own_prefix(tmp_path: Path) -> None:
    path = materialize_inline_data(b"piped", tmp_path, source="stdin")

    assert path.name == f"stdin-{hashlib.sha256(b'piped').hexdigest()[:16]}.txt"


def test_input_cache_lives_under_hankweave_home(managed_root: Path) -> None:
    assert default_input_cache_dir() == managed_root / ".cache" / "inputs"


# --- resolving the data and hank paths --------------------------------------------------------


def test_data_defaults_to_cwd_and_hank_to_its_hank_json(tmp_path: Path) -> None:
    paths = resolve_data_and_hank_paths(cwd=tmp_path)

    assert (paths.data_path, paths.hank_path) == (tmp_path, tmp_path / "hank.json")
    assert not paths.inline_data


def test_hank_argument_naming_a_directory_means_its_hank_json(tmp_path: Path) -> None:
    (tmp_path / "hanks" / "demo").mkdir(parents=True)

    paths = resolve_data_and_hank_paths(cwd=tmp_path, hank_arg="hanks/demo", data_arg="in")

    assert paths.hank_path == tmp_path / "hanks" / "demo" / "hank.json"
    assert paths.data_path == tmp_path / "in"


def test_a_data_directory_holding_hank_json_supplies_the_hank(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "hank.json").write_text("{}")

    paths = resolve_data_and_hank_paths(cwd=tmp_path, data_arg="d")

    assert paths.hank_path == tmp_path / "d" / "hank.json"


def test_inline_text_becomes_the_data_source(tmp_path: Path) -> None:
    paths = resolve_data_and_hank_paths(
        cwd=tmp_path, data_arg="ignored", inline_text="hi", cache_dir=tmp_path / "c"
    )

    assert paths.inline_data
    assert paths.data_path.parent == tmp_path / "c"
    assert paths.data_path.read_text() == "hi"


def test_dash_reads_stdin_and_fails_clearly_without_it(tmp_path: Path) -> None:
    paths = resolve_data_and_hank_paths(
        cwd=tmp_path, data_arg="-", stdin_text="from a pipe", cache_dir=tmp_path / "c"
    )

    assert paths.inline_data
    assert paths.data_path.name.startswith("stdin-")
    with pytest.raises(ExecutionSetupError, match="No input provided on stdin"):
        resolve_data_and_hank_paths(cwd=tmp_path, data_arg="-")


def test_pinned_execution_reuses_its_recorded_data_path(
    tmp_path: Path, request_for: Callable[..., SetupRequest], data_dir: Path
) -> None:
    execution = tmp_path / "exec"
    setup_execution(request_for(execution_path=execution))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    paths = resolve_data_and_hank_paths(cwd=elsewhere, execution_arg=str(execution))

    assert paths.data_path == data_dir
    assert paths.data_from_meta


# --- auto mode --------------------------------------------------------------------------------


def test_new_auto_execution_is_created_under_the_managed_root(
    managed_root: Path, request_for: Callable[..., SetupRequest], data_dir: Path, hank_file: Path
) -> None:
    result = setup_execution(request_for())

    layout = result.layout
    assert result.is_new
    assert layout.path.parent == managed_root
    assert re.fullmatch(rf"\d{{13}}-[0-9a-z]{{4}}-{result.data_hash[:6]}", layout.path.name)
    assert layout.agent_root.is_dir()
    assert layout.rig_archive.is_dir()
    assert layout.logs_dir.is_dir()
    assert layout.data_link.is_symlink()
    assert Path(os.readlink(layout.data_link)) == data_dir
    assert json.loads(layout.archive_manifest.read_text()) == {"version": "1.0.0", "entries": []}
    meta = json.loads(layout.meta_file.read_text())
    assert meta["version"] == "1.1.0"
    assert meta["dataHash"] == result.data_hash == hash_data_source(data_dir)
    assert meta["hankHash"] == hashlib.sha256(hank_file.read_bytes()).hexdigest()
    assert meta["hankPath"] == str(hank_file)
    assert meta["readOnlySourceDataPath"] == str(data_dir)
    assert meta["readOnlySourceResolvedDataPath"] == os.path.realpath(data_dir)
    assert meta["linkType"] == "symlink"
    assert meta["createdAt"] == meta["lastUsed"]
    assert set(meta["environment"]) == {
        "invocationMethod",
        "platform",
        "arch",
        "osRelease",
        "runtime",
    }


def test_auto_mode_resumes_the_newest_matching_execution(
    managed_root: Path, request_for: Callable[..., SetupRequest], tmp_path: Path
) -> None:
    older = setup_execution(request_for(start_new=True)).execution_path
    time.sleep(0.002)
    newer = setup_execution(request_for(start_new=True)).execution_path
    other_data = tmp_path / "other"
    other_data.mkdir()
    time.sleep(0.002)
    unrelated = setup_execution(replace(request_for(start_new=True), data_path=other_data))

    result = setup_execution(request_for())

    assert result.execution_path == newer != older
    assert result.is_resuming
    assert find_execution_dir_for_resume(result.data_hash, managed_root) == newer
    assert unrelated.execution_path != newer


def test_resume_keeps_created_at_and_refreshes_last_used(
    request_for: Callable[..., SetupRequest],
) -> None:
    first = setup_execution(request_for())
    time.sleep(0.002)

    second = setup_execution(request_for())

    assert second.execution_path == first.execution_path
    assert second.meta.created_at == first.meta.created_at
    assert second.meta.last_used > first.meta.last_used


def test_auto_resume_asks_before_continuing_with_a_changed_hank(
    request_for: Callable[..., SetupRequest], hank_file: Path
) -> None:
    setup_execution(request_for())
    hank_file.write_text('{"hank": [1]}\n')

    with pytest.raises(ExecutionSetupError, match=r"hank\.json has changed"):
        setup_execution(request_for())


# --- explicit -e ------------------------------------------------------------------------------


def test_pinned_execution_is_created_then_resumed(
    tmp_path: Path, request_for: Callable[..., SetupRequest]
) -> None:
    execution = tmp_path / "exec"

    first = setup_execution(request_for(execution_path=execution))
    second = setup_execution(request_for(execution_path=execution))

    assert first.is_new and first.execution_path == execution
    assert second.is_resuming and second.execution_path == execution


def test_new_execution_inside_the_managed_root_is_refused(
    managed_root: Path, request_for: Callable[..., SetupRequest]
) -> None:
    with pytest.raises(ExecutionSetupError, match="reserved for auto-managed executions") as caught:
        setup_execution(request_for(execution_path=managed_root / "mine"))

    assert isinstance(caught.value, ConfigError)
    assert not (managed_root / "mine").exists()


def test_a_sibling_of_the_managed_root_with_the_same_prefix_is_allowed(
    managed_root: Path, request_for: Callable[..., SetupRequest]
) -> None:
    sibling = managed_root.parent / (managed_root.name + "2") / "exec"

    assert setup_execution(request_for(execution_path=sibling)).is_new


def test_an_existing_managed_execution_may_be_pinned(
    request_for: Callable[..., SetupRequest],
) -> None:
    auto = setup_execution(request_for())

    pinned = setup_execution(request_for(execution_path=auto.execution_path))

    assert pinned.is_resuming


def test_existing_state_under_start_new_needs_force(
    tmp_path: Path, request_for: Callable[..., SetupRequest]
) -> None:
    execution = tmp_path / "exec"
    setup_execution(request_for(execution_path=execution))

    with pytest.raises(ExecutionSetupError, match="already contains execution state") as caught:
        setup_execution(request_for(execution_path=execution, start_new=True))

    assert "--force" in str(caught.value)


def test_forced_start_new_backs_up_state_and_wipes_agent_root(
    tmp_path: Path, request_for: Callable[..., SetupRequest]
) -> None:
    execution = tmp_path / "exec"
    old = setup_execution(request_for(execution_path=execution))
    (old.agent_root / "work.txt").write_text("old work")
    time.sleep(0.002)

    new = setup_execution(request_for(execution_path=execution, start_new=True, force=True))

    assert new.is_new
    assert new.backup_path is not None
    assert re.fullmatch(r"\.hankweave\.backup-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d", new.backup_path.name)
    assert load_execution_meta(new.backup_path / "execution-meta.json") == old.meta
    assert not (new.agent_root / "work.txt").exists()
    assert new.layout.data_link.is_symlink()
    assert new.meta.created_at != old.meta.created_at


@pytest.mark.parametrize("force", [False, True], ids=["-n", "-n -f"])
def test_start_new_refuses_a_directory_a_live_runtime_holds(
    tmp_path: Path, request_for: Callable[..., SetupRequest], force: bool
) -> None:
    from hankweave.state.lock import LockHeldError, RuntimeLock

    execution = tmp_path / "exec"
    old = setup_execution(request_for(execution_path=execution))
    (old.agent_root / "work.txt").write_text("old work")
    lock = RuntimeLock(old.layout.hankweave_dir)
    lock.acquire()
    try:
        with pytest.raises(LockHeldError, match="in use by another hankweave runtime"):
            setup_execution(request_for(execution_path=execution, start_new=True, force=force))
    finally:
        lock.release()

    assert (old.agent_root / "work.txt").read_text() == "old work"
    assert old.layout.meta_file.is_file()
    assert not list(execution.glob(".hankweave.backup-*"))


def test_forced_start_new_reclaims_a_stale_lock_and_keeps_none_in_the_backup(
    tmp_path: Path, request_for: Callable[..., SetupRequest]
) -> None:
    from hankweave.state.lock import LockInfo

    execution = tmp_path / "exec"
    old = setup_execution(request_for(execution_path=execution))
    dead = LockInfo(pid=2**22 + 12345, lockId="gone", lastHeartbeat="2020-01-01T00:00:00.000Z")
    (old.layout.hankweave_dir / "runtime.lock").write_bytes(dead.to_json_bytes())

    new = setup_execution(request_for(execution_path=execution, start_new=True, force=True))

    assert new.backup_path is not None
    assert not (new.backup_path / "runtime.lock").exists()


def test_no_wipe_keeps_the_old_agent_root(
    tmp_path: Path, request_for: Callable[..., SetupRequest]
) -> None:
    execution = tmp_path / "exec"
    old = setup_execution(request_for(execution_path=execution))
    (old.agent_root / "work.txt").write_text("old work")

    new = setup_execution(
        request_for(execution_path=execution, start_new=True, force=True, no_wipe=True)
    )

    assert (new.agent_root / "work.txt").read_text() == "old work"
    assert new.backup_path is not None and new.backup_path.is_dir()


def test_non_empty_directory_is_refused_without_confirmation(
    tmp_path: Path, request_for: Callable[..., SetupRequest]
) -> None:
    execution = tmp_path / "mine"
    (execution / "src").mkdir(parents=True)
    (execution / "notes.txt").write_text("mine")
    asked = Asked(False)

    with pytest.raises(ExecutionSetupError, match="Operation cancelled") as caught:
        setup_execution(request_for(execution_path=execution, start_new=True, confirm=asked))

    assert "-y" in str(caught.value)
    assert "(1 files, 1 directories)" in asked.questions[0]
    assert not (execution / ".hankweave").exists()


def test_non_empty_directory_is_refused_by_default_without_start_new(
    tmp_path: Path, request_for: Callable[..., SetupRequest]
) -> None:
    execution = tmp_path / "mine"
    execution.mkdir()
    (execution / "notes.txt").write_text("mine")

    with pytest.raises(ExecutionSetupError, match="Operation cancelled"):
        setup_execution(request_for(execution_path=execution))


def test_non_empty_directory_is_used_when_confirmed_or_with_yes(
    tmp_path: Path, request_for: Callable[..., SetupRequest]
) -> None:
    confirmed, with_yes = tmp_path / "confirmed", tmp_path / "yes"
    for directory in (confirmed, with_yes):
        directory.mkdir()
        (directory / "notes.txt").write_text("mine")
    asked = Asked(True)
    never = Asked(False)

    assert setup_execution(request_for(execution_path=confirmed, confirm=asked)).is_new
    assert setup_execution(request_for(execution_path=with_yes, yes=True, confirm=never)).is_new
    assert len(asked.questions) == 1
    assert never.questions == []
    assert (with_yes / "notes.txt").read_text() == "mine"


def test_changed_data_is_refused_without_force(
    tmp_path: Path, request_for: Callable[..., SetupRequest], data_dir: Path
) -> None:
    execution = tmp_path / "exec"
    setup_execution(request_for(execution_path=execution))
    (data_dir / "added.txt").write_text("new")

    with pytest.raises(ExecutionSetupError, match="Data source has changed") as caught:
        setup_execution(request_for(execution_path=execution))

    assert "--force" in str(caught.value)
    assert "-n --force" in str(caught.value)


def test_changed_data_is_relinked_with_force(
    tmp_path: Path, request_for: Callable[..., SetupRequest]
) -> None:
    execution = tmp_path / "exec"
    first = setup_execution(request_for(execution_path=execution))
    new_data = tmp_path / "new-data"
    new_data.mkdir()
    (new_data / "x.txt").write_text("x")

    result = setup_execution(
        replace(request_for(execution_path=execution, force=True), data_path=new_data)
    )

    assert result.is_resuming
    assert result.data_relinked
    assert Path(os.readlink(result.layout.data_link)) == new_data
    assert result.meta.data_hash == hash_data_source(new_data) != first.data_hash
    assert result.meta.created_at == first.meta.created_at


def test_changed_hank_needs_confirmation_when_resuming(
    tmp_path: Path, request_for: Callable[..., SetupRequest], hank_file: Path
) -> None:
    execution = tmp_path / "exec"
    setup_execution(request_for(execution_path=execution))
    hank_file.write_text('{"hank": ["changed"]}\n')
    declined, accepted = Asked(False), Asked(True)

    with pytest.raises(ExecutionSetupError, match=r"hank\.json has changed"):
        setup_execution(request_for(execution_path=execution, confirm=declined))
    result = setup_execution(request_for(execution_path=execution, confirm=accepted))

    assert "Continue with modified config?" in declined.questions[0]
    assert result.hank_changed and result.is_resuming
    assert result.meta.hank_hash == compute_hank_hash(hank_file)


def test_execution_directory_may_not_be_the_data_source(
    request_for: Callable[..., SetupRequest], data_dir: Path
) -> None:
    with pytest.raises(ExecutionSetupError, match="cannot be the same as the data source"):
        setup_execution(request_for(execution_path=data_dir))


def test_execution_inside_another_execution_is_refused(
    tmp_path: Path, request_for: Callable[..., SetupRequest]
) -> None:
    outer = setup_execution(request_for(execution_path=tmp_path / "exec"))

    with pytest.raises(ExecutionSetupError, match="inside another execution directory"):
        setup_execution(request_for(execution_path=outer.agent_root / "nested"))


def test_execution_path_that_is_a_file_is_refused(
    tmp_path: Path, request_for: Callable[..., SetupRequest]
) -> None:
    (tmp_path / "file").write_text("x")

    with pytest.raises(ExecutionSetupError, match="not a directory"):
        setup_execution(request_for(execution_path=tmp_path / "file"))


def test_missing_data_source_is_a_clear_error(
    tmp_path: Path, request_for: Callable[..., SetupRequest]
) -> None:
    with pytest.raises(ExecutionSetupError, match="Data source not found"):
        setup_execution(replace(request_for(), data_path=tmp_path / "missing"))


def test_a_fifo_hank_file_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "hank.json")

    with pytest.raises(ExecutionSetupError, match="not a regular file"):
        compute_hank_hash(tmp_path / "hank.json")
    assert compute_hank_hash(tmp_path / "missing.json") is None


# --- the data link ----------------------------------------------------------------------------


def test_copy_mode_copies_the_data_and_skips_special_files(
    tmp_path: Path, request_for: Callable[..., SetupRequest], data_dir: Path
) -> None:
    (data_dir / "sub").mkdir()
    (data_dir / "sub" / "deep.txt").write_text("deep")
    (data_dir / "link").symlink_to("a.txt")
    os.mkfifo(data_dir / "pipe")

    result = setup_execution(request_for(execution_path=tmp_path / "exec", copy_data=True))

    link = result.layout.data_link
    assert result.link_type == result.meta.link_type == "copy"
    assert link.is_dir() and not link.is_symlink()
    assert (link / "sub" / "deep.txt").read_text() == "deep"
    assert (link / "link").is_symlink()
    assert not os.path.lexists(link / "pipe")


def test_file_source_is_linked_into_a_directory_under_its_name(
    tmp_path: Path, request_for: Callable[..., SetupRequest]
) -> None:
    source = tmp_path / "report.csv"
    source.write_text("a,b\n")

    linked = setup_execution(replace(request_for(execution_path=tmp_path / "e1"), data_path=source))
    copied = setup_execution(
        replace(request_for(execution_path=tmp_path / "e2", copy_data=True), data_path=source)
    )

    assert linked.layout.data_link.is_dir()
    assert (linked.layout.data_link / "report.csv").is_symlink()
    assert (linked.layout.data_link / "report.csv").read_text() == "a,b\n"
    assert copied.link_type == "copy"
    assert not (copied.layout.data_link / "report.csv").is_symlink()
    assert (copied.layout.data_link / "report.csv").read_text() == "a,b\n"


def test_failed_symlink_falls_back_to_a_copy(
    tmp_path: Path, request_for: Callable[..., SetupRequest], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(execution_setup.os, "symlink", refuse)

    result = setup_execution(request_for(execution_path=tmp_path / "exec"))

    assert result.link_type == "copy"
    assert (result.layout.data_link / "a.txt").read_text() == "a.txt"
    assert any("copying it instead" in notice for notice in result.notices)


def test_missing_data_link_is_recreated_on_resume(
    tmp_path: Path, request_for: Callable[..., SetupRequest]
) -> None:
    first = setup_execution(request_for(execution_path=tmp_path / "exec"))
    first.layout.data_link.unlink()

    again = setup_execution(request_for(execution_path=tmp_path / "exec"))

    assert again.layout.data_link.is_symlink()
    assert again.link_type == "symlink"


# --- a replay's recording ---------------------------------------------------------------------


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    """An opened recording's folder: its hank, data and a log."""
    root = tmp_path / "unpacked"
    (root / "hank").mkdir(parents=True)
    (root / "hank" / "hank.json").write_text('{"hank": []}\n')
    (root / "data").mkdir()
    (root / "data" / "input.txt").write_text("input")
    (root / "logs").mkdir()
    (root / "logs" / "a-claude.log").write_text("{}\n")
    return root


def replay_request(folder: Path, execution: Path, **fields: Any) -> SetupRequest:
    """Set up with the data and the hank of a recording's folder, as the launch of a replay."""
    return SetupRequest(data_path=folder / "data", hank_path=folder / "hank" / "hank.json",
                        execution_path=execution, copy_data=True, **fields)


def test_a_new_replay_keeps_its_recording_and_runs_from_the_copy(
    tmp_path: Path, recording: Path
) -> None:
    result = setup_execution(replay_request(recording, tmp_path / "exec", start_new=True,
                                            recording=recording))

    kept = result.layout.recording_dir
    assert (kept / "logs" / "a-claude.log").read_text() == "{}\n"
    assert result.hank_path == kept / "hank" / "hank.json"
    assert result.data_source == kept / "data"
    meta = load_execution_meta(result.layout.meta_file)
    assert meta.recording == ".hankweave/recording"
    assert meta.hank_path == str(kept / "hank" / "hank.json")
    assert meta.read_only_source_data_path == str(kept / "data")
    assert meta.data_hash == hash_data_source(kept / "data")
    assert (result.layout.data_link / "input.txt").read_text() == "input"
    assert not result.layout.data_link.is_symlink()
    assert [p.name for p in result.layout.hankweave_dir.iterdir() if "partial" in p.name] == []


def test_a_kept_recording_resumes_after_its_source_is_gone(
    tmp_path: Path, recording: Path
) -> None:
    first = setup_execution(replay_request(recording, tmp_path / "exec", start_new=True,
                                           recording=recording))
    shutil.rmtree(recording)
    kept = first.layout.recording_dir

    again = setup_execution(replay_request(kept, tmp_path / "exec"))

    assert again.is_resuming and not again.data_relinked
    assert again.meta.recording == ".hankweave/recording"
    assert again.meta.data_hash == first.meta.data_hash


def test_a_data_source_from_outside_the_recording_is_used_where_it_is(
    tmp_path: Path, recording: Path, data_dir: Path
) -> None:
    result = setup_execution(replace(
        replay_request(recording, tmp_path / "exec", start_new=True, recording=recording),
        data_path=data_dir))

    assert result.meta.read_only_source_data_path == str(data_dir)
    assert result.hank_path == result.layout.recording_dir / "hank" / "hank.json"


def test_an_execution_inside_its_recording_does_not_copy_itself(recording: Path) -> None:
    result = setup_execution(replay_request(recording, recording / "replayed", start_new=True,
                                            recording=recording))

    assert sorted(p.name for p in result.layout.recording_dir.iterdir()) == [
        "data", "hank", "logs"]


def test_a_recording_is_kept_only_by_a_new_execution(tmp_path: Path, recording: Path) -> None:
    with pytest.raises(ValueError, match="only by a new execution"):
        setup_execution(replay_request(recording, tmp_path / "exec", recording=recording))
