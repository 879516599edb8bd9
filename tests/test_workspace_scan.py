"""WorkspaceScan: the cached resolver gives exactly resolve_patterns's answer, in its order,
whatever happens to the tree between two scans, and reads only the directories that changed."""

from __future__ import annotations

import contextlib
import os
import random
import time
from pathlib import Path

import pytest

from hankweave import workspace
from hankweave.workspace import WorkspaceScan, resolve_patterns

PATTERN_SETS = (("**",), ("src/**", "*.md"), ("**/*.py", "docs"), ("a*/**/b?.txt",))


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()
                  and ".git" not in p.parts)


def _dirs(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_dir() and not p.is_symlink()
                  and ".git" not in p.parts)


def _mutate(root: Path, rng: random.Random, step: int) -> None:
    """One random change of the kinds an agent (or a tool) makes."""
    names = ["a1", "a2", "src", "docs", "b1.txt", "b2.txt", "x.py", "README.md", "deep"]
    dirs = [root, *_dirs(root)]
    files = _files(root)
    where = rng.choice(dirs)
    action = rng.randrange(12)
    # OSError: the name is taken by something of another kind, and that step changes nothing.
    with contextlib.suppress(OSError):
        _apply(action, root, rng, step, dirs, files, where, names)


def _apply(action: int, root: Path, rng: random.Random, step: int, dirs: list[Path],
           files: list[Path], where: Path, names: list[str]) -> None:
    if action == 0:
        (where / rng.choice(names)).mkdir()
    elif action in (1, 2):
        target = where / f"{rng.choice(names)}{'.txt' if action == 2 else ''}"
        with open(target, "w") as fh:
            fh.write(f"{step}")
    elif action == 3 and files:
        rng.choice(files).unlink()
    elif action == 4 and files:
        rng.choice(files).rename(rng.choice(dirs) / f"moved{step}.py")
    elif action == 5:
        lines = rng.sample(["*.txt", "b?", "!b1.txt", "deep/", "docs", "*.py", "x*"], 2)
        (where / ".gitignore").write_text("\n".join(lines) + "\n")  # often the same size
    elif action == 6:
        (where / ".gitignore").unlink()
    elif action == 7 and len(dirs) > 1:
        victim = rng.choice(dirs[1:])
        for child in sorted(victim.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if child.is_dir() and not child.is_symlink():
                child.rmdir()
            else:
                child.unlink()
        victim.rmdir()
        if rng.random() < 0.5:  # a directory replaced by a link to another one
            os.symlink(root, victim)
    elif action == 8:
        os.symlink(rng.choice(dirs) if rng.random() < 0.5 else "nowhere", where / f"link{step}")
    elif action == 9:
        os.mkfifo(where / f"fifo{step}")
    elif action == 10:
        # A tool that puts a directory's mtime back after changing it (tar, rsync -t).
        before = os.stat(where)
        (where / f"restored{step}.txt").write_text("r")
        os.utime(where, ns=(before.st_atime_ns, before.st_mtime_ns))
    elif action == 11:
        (where / ".git").mkdir(exist_ok=True)
        (where / ".git" / "HEAD").write_text("ref")


def _coarse_timestamps(monkeypatch: pytest.MonkeyPatch, tick_ns: int) -> None:
    """Make the scan see a file system whose timestamps have ``tick_ns`` granularity (1 s on
    HFS+, a kernel tick on older Linux): two changes within a tick leave the same stat."""
    real_key, real_clock = workspace._stat_key, workspace._clock

    def coarse_key(st: os.stat_result) -> tuple[int, int, int, int]:
        dev, ino, mtime, ctime = real_key(st)
        return (dev, ino, mtime // tick_ns * tick_ns, ctime // tick_ns * tick_ns)

    monkeypatch.setattr(workspace, "_stat_key", coarse_key)
    monkeypatch.setattr(workspace, "_clock",
                        lambda *args: real_clock(*args) // tick_ns * tick_ns)


@pytest.mark.parametrize("timestamps", ["fine", "coarse"])
@pytest.mark.parametrize("seed", range(8))
def test_the_cached_scan_always_equals_a_fresh_resolve(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, timestamps: str) -> None:
    if timestamps == "coarse":
        _coarse_timestamps(monkeypatch, 50_000_000)
    rng = random.Random(seed)
    root = tmp_path / "agentRoot"
    root.mkdir()
    (root / "read_only_data_source").mkdir()
    (root / "read_only_data_source" / "input.txt").write_text("data")
    scan = WorkspaceScan(root, tmp_path / "fs-clock")
    for step in range(60):
        for _ in range(rng.randrange(1, 4)):
            _mutate(root, rng, step)
        if rng.random() < 0.3:
            time.sleep(0.02)  # let some changes age past the clock tick, so caches are kept
        for patterns in PATTERN_SETS:
            assert scan.resolve(patterns) == resolve_patterns(root, patterns), (seed, step)


def _tree(root: Path, files: int) -> None:
    for i in range(files):
        path = root / f"pkg{i % 5}" / f"mod{(i // 5) % 4}" / f"f{i}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(str(i))


def _count_scandirs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = os.scandir

    def counting(path: str) -> object:
        calls.append(str(path))
        return real(path)

    monkeypatch.setattr(workspace.os, "scandir", counting)
    return calls


def test_an_unchanged_tree_is_not_read_again(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "agentRoot"
    _tree(root, 100)
    scan = WorkspaceScan(root, tmp_path / "fs-clock")
    time.sleep(0.05)  # the tree is older than the file system's clock tick
    first = scan.resolve(["**"])
    calls = _count_scandirs(monkeypatch)
    assert scan.resolve(["**"]) == first
    assert calls == []


def test_only_the_changed_directory_is_read_again(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "agentRoot"
    _tree(root, 100)
    scan = WorkspaceScan(root, tmp_path / "fs-clock")
    time.sleep(0.05)
    scan.resolve(["**"])
    (root / "pkg2" / "mod1" / "new.txt").write_text("new")
    calls = _count_scandirs(monkeypatch)
    assert "pkg2/mod1/new.txt" in scan.resolve(["**"])
    assert calls == [str(root / "pkg2" / "mod1")]


def test_a_gitignore_edited_in_place_is_seen(tmp_path: Path) -> None:
    root = tmp_path / "agentRoot"
    _tree(root, 40)
    (root / ".gitignore").write_text("pkg1\n")
    scan = WorkspaceScan(root, tmp_path / "fs-clock")
    time.sleep(0.05)
    assert not any(p.startswith("pkg1/") for p in scan.resolve(["**"]))
    (root / ".gitignore").write_text("pkg2\n")  # same size, the root's mtime does not move
    resolved = scan.resolve(["**"])
    assert any(p.startswith("pkg1/") for p in resolved)
    assert not any(p.startswith("pkg2/") for p in resolved)
    assert resolved == resolve_patterns(root, ["**"])


@pytest.mark.parametrize("seed", range(6))
def test_resolving_under_a_path_equals_filtering_a_full_resolve(tmp_path: Path,
                                                                seed: int) -> None:
    rng = random.Random(seed)
    root = tmp_path / "agentRoot"
    root.mkdir()
    scan = WorkspaceScan(root, tmp_path / "fs-clock")
    for step in range(40):
        _mutate(root, rng, step)
        candidates = {p.relative_to(root).as_posix() for p in root.rglob("*")}
        candidates |= {"nowhere", "a1/nowhere", "read_only_data_source", "x/.git/HEAD"}
        for patterns in PATTERN_SETS:
            full = resolve_patterns(root, patterns)
            for rel in sorted(candidates):
                expected = [p for p in full if p == rel or p.startswith(rel + "/")]
                assert scan.resolve_under(patterns, rel) == expected, (seed, step, rel)
