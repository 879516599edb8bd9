"""Programs planted in the checkpoint repository never run (issue 34 item 2).

An agent can write the shadow repository's ``config`` and ``info/attributes`` from
``agentRoot`` (``git config --file ../.hankweave/checkpoints/.hankweavecheckpoints/config
core.fsmonitor evil.sh``).  Each plant below names a program that writes a marker file; every
store operation runs after the plant, and the marker must never appear.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hankweave.api import RetentionPolicy

from hankweave_checkpoint_git import GitCheckpointStore
from hankweave_checkpoint_git.commands import GitReader
from hankweave_checkpoint_git.owned import repository_config

HOOKS = ("reference-transaction", "post-checkout", "post-index-change", "pre-auto-gc",
         "pre-commit", "post-commit", "post-rewrite", "pre-push")


@dataclass
class Planted:
    """An execution with two checkpoints, and the program an agent planted for git to run."""

    execution_dir: Path
    first: str
    second: str
    program: Path
    marker: Path
    scratch: Path

    @property
    def git_dir(self) -> Path:
        return self.execution_dir / ".hankweave" / "checkpoints" / ".hankweavecheckpoints"

    def append(self, relative: str, text: str) -> None:
        with (self.git_dir / relative).open("a", encoding="utf-8") as fh:
            fh.write(text)

    def ran(self) -> str:
        return self.marker.read_text() if self.marker.exists() else ""


@pytest.fixture
def planted(tmp_path: Path) -> Planted:
    execution_dir = tmp_path / "exec"
    store = GitCheckpointStore(execution_dir)
    store.initialize()
    (store.work_tree / "a.txt").write_text("one\n")
    first = store.create(kind="completed", run_id="r1", codon_id="c1", codon_name="C1",
                         patterns=("**",))
    (store.work_tree / "a.txt").write_text("two\n")
    (store.work_tree / "b.txt").write_text("bee\n")
    second = store.create(kind="completed", run_id="r1", codon_id="c2", codon_name="C2",
                          patterns=("**",))
    store.close()
    marker = tmp_path / "marker"
    program = tmp_path / "evil.sh"
    # A filter passes the content through (cat), so git has no reason to stop early.
    program.write_text(f'#!/bin/sh\necho "$0 $*" >> "{marker}"\ncat\n')
    program.chmod(0o755)
    return Planted(execution_dir, first.id, second.id, program, marker, tmp_path)


def _hooks(directory: Path, planted: Planted) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in HOOKS:
        hook = directory / name
        hook.write_text(f'#!/bin/sh\necho "{name}" >> "{planted.marker}"\n')
        hook.chmod(0o755)


def plant_fsmonitor(p: Planted) -> None:
    p.append("config", f"[core]\n\tfsmonitor = {p.program}\n")


def plant_hooks_path(p: Planted) -> None:
    _hooks(p.scratch / "hooks", p)
    p.append("config", f"[core]\n\thooksPath = {p.scratch / 'hooks'}\n")


def plant_default_hooks(p: Planted) -> None:
    """Hooks where git looks when core.hooksPath is gone from the config."""
    config = p.git_dir / "config"
    config.write_text("".join(line for line in config.read_text().splitlines(keepends=True)
                              if "hookspath" not in line.lower()))
    _hooks(p.git_dir / "hooks", p)


def plant_filter(p: Planted) -> None:
    p.append("config", f'[filter "x"]\n\tclean = {p.program} clean\n'
                       f"\tsmudge = {p.program} smudge\n")
    p.append("info/attributes", "* filter=x\n")


def plant_process_filter(p: Planted) -> None:
    p.append("config", f'[filter "long"]\n\tprocess = {p.program} process\n')
    p.append("info/attributes", "* filter=long\n")


def plant_include(p: Planted) -> None:
    """The config only includes another file, which defines the programs."""
    included = p.scratch / "included.cfg"
    included.write_text(f'[core]\n\tfsmonitor = {p.program}\n'
                        f'[filter "y"]\n\tclean = {p.program} clean\n'
                        f"\tsmudge = {p.program} smudge\n")
    p.append("config", f"[include]\n\tpath = {included}\n")
    p.append("info/attributes", "* filter=y\n")


def plant_symlinked_config(p: Planted) -> None:
    """config replaced by a link to a file the agent keeps editing."""
    theirs = p.scratch / "their-config"
    theirs.write_text((p.git_dir / "config").read_text()
                      + f"[core]\n\tfsmonitor = {p.program}\n")
    (p.git_dir / "config").unlink()
    (p.git_dir / "config").symlink_to(theirs)


def plant_symlinked_info(p: Planted) -> None:
    """info/ replaced by a link to a directory whose attributes pick a planted filter."""
    theirs = p.scratch / "their-info"
    theirs.mkdir()
    (theirs / "attributes").write_text("* filter=x\n")
    shutil.rmtree(p.git_dir / "info")
    (p.git_dir / "info").symlink_to(theirs)
    p.append("config", f'[filter "x"]\n\tclean = {p.program} clean\n'
                       f"\tsmudge = {p.program} smudge\n")


def plant_external_diff(p: Planted) -> None:
    p.append("config", f"[diff]\n\texternal = {p.program}\n"
                       f'[diff "x"]\n\ttextconv = {p.program} textconv\n'
                       f"\tcommand = {p.program} command\n"
                       f"[log]\n\tshowSignature = true\n[gpg]\n\tprogram = {p.program}\n")
    p.append("info/attributes", "* diff=x\n")


PLANTS: dict[str, Callable[[Planted], None]] = {
    "fsmonitor": plant_fsmonitor,
    "hooksPath": plant_hooks_path,
    "default hooks": plant_default_hooks,
    "smudge/clean filter": plant_filter,
    "process filter": plant_process_filter,
    "include.path": plant_include,
    "symlinked config": plant_symlinked_config,
    "symlinked info directory": plant_symlinked_info,
    "external diff, textconv, gpg": plant_external_diff,
}


def op_create(p: Planted, store: GitCheckpointStore) -> None:
    (store.work_tree / "c.txt").write_text("sea\n")
    (store.work_tree / "a.txt").write_text("three\n")
    store.create(kind="completed", run_id="r2", codon_id="c3", codon_name="C3",
                 patterns=("**",))


OPERATIONS: dict[str, Callable[[Planted, GitCheckpointStore], object]] = {
    "initialize": lambda p, store: store.initialize(),
    "create": op_create,
    "restore": lambda p, store: store.restore(p.first),
    "changed_files": lambda p, store: store.changed_files(p.first, p.second),
    "materialize": lambda p, store: store.materialize(p.second, p.scratch / "out"),
    "list": lambda p, store: store.list(),
    "files": lambda p, store: store.files(p.second),
    "prune": lambda p, store: store.prune(RetentionPolicy(keep_last_per_run=0)),
    "list_read_only": lambda p, store: store.list_read_only(),
}


@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize("plant", PLANTS)
def test_a_program_planted_in_the_repository_never_runs(planted, plant, operation):
    PLANTS[plant](planted)
    store = GitCheckpointStore(planted.execution_dir)  # a later command opens the store
    OPERATIONS[operation](planted, store)
    assert planted.ran() == ""


@pytest.mark.parametrize("plant", ["fsmonitor", "smudge/clean filter", "hooksPath"])
def test_a_plant_made_while_the_runtime_holds_the_store_never_runs(planted, plant):
    store = GitCheckpointStore(planted.execution_dir)
    store.initialize()  # the runtime's store, open before the agent's codon
    PLANTS[plant](planted)
    op_create(planted, store)
    store.restore(planted.first)
    assert planted.ran() == ""


def canonical(tmp_path: Path) -> dict[str, bytes]:
    """The config and attributes of a repository nobody has touched, on the same disk."""
    store = GitCheckpointStore(tmp_path / "untouched")
    store.initialize()
    return {name: (store.git_dir / name).read_bytes() for name in ("config", "info/attributes")}


@pytest.mark.parametrize(("plant", "changed"), [("include.path", ["config", "info/attributes"]),
                                               ("symlinked config", ["config"])])
def test_the_repository_config_and_attributes_are_put_back_and_a_warning_says_so(
        planted, plant, changed, caplog):
    PLANTS[plant](planted)
    store = GitCheckpointStore(planted.execution_dir)
    with caplog.at_level(logging.WARNING, logger="hankweave.checkpoints.git"):
        store.list()
        store.files(planted.second)
    git_dir = planted.git_dir
    assert not (git_dir / "config").is_symlink()
    assert {name: (git_dir / name).read_bytes()
            for name in ("config", "info/attributes")} == canonical(planted.scratch)
    # One warning per file put back, not one per git command.
    assert [r.getMessage() for r in caplog.records] == [
        f"the checkpoint repository's {name} had been changed, probably by an agent; restored "
        f"({git_dir / name})" for name in changed]


def test_an_untouched_repository_is_not_rewritten(planted):
    git_dir = planted.git_dir
    before = {name: os.stat(git_dir / name).st_ino for name in ("config", "info/attributes")}
    store = GitCheckpointStore(planted.execution_dir)
    store.list()
    op_create(planted, store)
    assert {name: os.stat(git_dir / name).st_ino
            for name in ("config", "info/attributes")} == before


def test_the_read_only_listing_writes_nothing_even_when_the_config_was_changed(planted):
    plant_include(planted)
    before = (planted.git_dir / "config").read_bytes()
    assert [c.id for c in GitCheckpointStore(planted.execution_dir).list_read_only()][:2] == [
        planted.second, planted.first]
    assert (planted.git_dir / "config").read_bytes() == before
    assert planted.ran() == ""


def test_the_read_only_listing_asks_git_for_the_drivers_only_when_the_config_may_name_one(
        planted, monkeypatch):
    """Listing the config costs a git process; the backend's own config names no driver."""
    calls: list[tuple[str, ...]] = []
    real_call = GitReader.call

    def counted(self, *args, **kwargs):
        calls.append(args)
        return real_call(self, *args, **kwargs)

    monkeypatch.setattr(GitReader, "call", counted)
    store = GitCheckpointStore(planted.execution_dir)
    store.list_read_only()
    assert not [c for c in calls if c[0] == "config"]
    plant_filter(planted)
    calls.clear()
    store.list_read_only()
    assert [c for c in calls if c[0] == "config"]
    assert planted.ran() == ""


@pytest.mark.parametrize("plant", ["smudge/clean filter", "include.path"])
def test_the_read_only_reader_empties_every_driver_the_config_defines(planted, plant):
    """``cat-file --filters`` applies smudge filters; through the reader it applies none."""
    PLANTS[plant](planted)
    checkpoints = planted.execution_dir / ".hankweave" / "checkpoints"
    reader = GitReader(planted.git_dir, checkpoints, planted.execution_dir)
    shown = reader.run("cat-file", "--filters", f"{planted.second}:a.txt")
    assert shown == b"two\n"
    assert planted.ran() == ""


def test_a_config_written_on_another_disk_is_kept_as_it_is(planted, caplog):
    """The disk's flags (what git init probes) are the backend's own values either way: a
    repository moved from a disk without executable bits is neither rewritten nor warned of."""
    config = planted.git_dir / "config"
    config.write_bytes(repository_config(filemode=False, ignorecase=True,
                                                 precomposeunicode=False))
    before = config.stat().st_ino
    with caplog.at_level(logging.WARNING, logger="hankweave.checkpoints.git"):
        GitCheckpointStore(planted.execution_dir).list()
    assert config.stat().st_ino == before and not caplog.records
