"""Checkpoints read back from the repository: commit messages parsed into records.

A checkpoint's commit message is :func:`hankweave.checkpoints.checkpoint_message` followed by a
trailer paragraph (``Hankweave-Sequence``, ``Hankweave-Patterns``); commits made by Hankweave
0.10.0 have no trailers and are ordered by time.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from hankweave.api import Checkpoint, parse_iso, run_branch

from hankweave_checkpoint_git.commands import GitCommands
from hankweave_checkpoint_git.environment import NO_PROGRAMS_IN_DIFFS
from hankweave_checkpoint_git.refs import INITIAL_BRANCH, INITIAL_MESSAGE, INITIAL_REF

SUBJECT = re.compile(
    r"(?P<kind>rig-setup|completed|error|skipped|exit):(?P<codon>.*?) "
    r"\[run:(?P<run>[^\]]*)\](?: .*)?"
)
TRAILER_PREFIX = "Hankweave-"
HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class Record:
    """A listed checkpoint plus what only this backend needs to know about it."""

    checkpoint: Checkpoint
    order: tuple[float, ...]
    patterns: tuple[str, ...] | None  # None: made by Hankweave 0.10.0, patterns unknown
    sequence: int | None  # None: not made by this backend, so not prunable


def recorded_initial(git: GitCommands) -> str | None:
    """The initial checkpoint named by our ref, or None (a repository of Hankweave 0.10.0)."""
    status, out, _ = git.call("rev-parse", "--verify", "--quiet", f"{INITIAL_REF}^{{commit}}")
    return out.decode().strip() if status == 0 else None


def original_initial(git: GitCommands) -> str | None:
    """The initial checkpoint of a repository made by Hankweave 0.10.0: its root commit."""
    roots = git.run("log", *NO_PROGRAMS_IN_DIFFS, "--all", "--max-parents=0",
                    "--format=%H %s").decode()
    for line in roots.splitlines():
        sha, _, subject = line.partition(" ")
        if subject == INITIAL_MESSAGE:
            return sha
    return None


def read_records(git: GitCommands, initial: str | None) -> list[Record]:
    """Every checkpoint reachable from a ref, newest first (``initial``: the initial commit)."""
    out = git.run("log", *NO_PROGRAMS_IN_DIFFS, "--all", "--date-order", "-z",
                  "--format=%H%x1f%ct%x1f%B")
    records: dict[str, Record] = {}
    entries = [e for e in out.decode("utf-8", errors="replace").split("\0") if e]
    for position, entry in enumerate(entries):
        sha, committed, body = entry.split("\x1f", 2)
        if sha in records:
            continue
        record = parse_record(sha, int(committed), body, sha == initial, position)
        if record is not None:
            records[sha] = record
    return sorted(records.values(), key=lambda r: r.order, reverse=True)


def parse_record(
    sha: str, committed: int, body: str, is_initial: bool, position: int,
) -> Record | None:
    """A checkpoint from a commit's message; ``None`` for commits that are not checkpoints."""
    message, trailers = _split_trailers(body)
    if is_initial:
        timestamp = _iso(committed)
        checkpoint = Checkpoint(id=sha, kind="initial", message=message, timestamp=timestamp,
                                branch=INITIAL_BRANCH)
        return Record(checkpoint, (0.0,), (), None)
    subject = SUBJECT.fullmatch(message.split("\n", 1)[0])
    if subject is None:
        return None  # e.g. the original's recovery snapshots
    timestamp = _field(message, "Timestamp") or _iso(committed)
    run_id = subject["run"]
    checkpoint = Checkpoint(
        id=sha, kind=subject["kind"], message=message,  # type: ignore[arg-type]
        timestamp=timestamp, branch=run_branch(run_id), run_id=run_id,
        codon_id=subject["codon"])
    sequence_text = trailers.get("Sequence")
    if sequence_text is None or not sequence_text.isdigit():
        # Made by Hankweave 0.10.0: order by time, then by git's date order.
        return Record(checkpoint, (1.0, _epoch(timestamp, committed), -position), None, None)
    try:
        patterns = tuple(str(p) for p in json.loads(trailers.get("Patterns", "[]")))
    except ValueError:
        patterns = None
    sequence = int(sequence_text)
    return Record(checkpoint, (2.0, float(sequence)), patterns, sequence)


def _split_trailers(body: str) -> tuple[str, dict[str, str]]:
    """Split our trailer paragraph off a commit message."""
    head, sep, last = body.rpartition("\n\n")
    lines = [line for line in last.split("\n") if line]
    if not sep or not lines or not all(line.startswith(TRAILER_PREFIX) for line in lines):
        return body, {}
    trailers = {}
    for line in lines:
        key, _, value = line[len(TRAILER_PREFIX):].partition(":")
        trailers[key.strip()] = value.strip()
    return head + "\n", trailers


def _field(message: str, name: str) -> str | None:
    for line in message.split("\n")[1:]:
        if line.startswith(f"{name}: "):
            return line[len(name) + 2:].strip()
    return None


def _iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def _epoch(timestamp: str, fallback: int) -> float:
    try:
        return parse_iso(timestamp).timestamp()
    except ValueError:
        return float(fallback)


def dated(timestamp: str) -> dict[str, str]:
    """Author and committer dates for a commit made at ``timestamp``."""
    date = f"{int(parse_iso(timestamp).timestamp())} +0000"
    return {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
