"""Where everything lives inside an execution directory (docs/behaviour.md §2.5).

```
<exec>/
  agentRoot/                    the agent's working directory and checkpoint work tree
    read_only_data_source/      symlink to (or copy of) the data source
  rigArchive/                   archiveOnSuccess targets
  .hankweave/
    execution-meta.json  archive-manifest.json  state.json  state.json.bak  state.wal
    state.wal.prev  output-copy.json  run-intent.json  runtime.lock  events/events.jsonl
    mock-provider/{script.json,requests.jsonl}
    runs/<runId>/<codonId>-claude.log  runs/<runId>/<codonId>-stderr.log  harnesses/<name>/
    logs/server.log  logs/websocket.log  checkpoints/  sentinels/
    recording/                  a replay's recording: the hank, data, logs and snapshots it plays
  .hankweave.backup-<ts>/       earlier state, set aside by `-n --force`
```

Every component that reads or writes one of these paths takes it from :class:`ExecutionLayout`,
so the layout is spelled out once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from hankweave.state.files import BACKUP_FILE, LOCK_FILE_NAME, STATE_FILE, WAL_FILE
from hankweave.workspace import DATA_LINK

HANKWEAVE_DIR = ".hankweave"
AGENT_ROOT_DIR = "agentRoot"
RIG_ARCHIVE_DIR = "rigArchive"
META_FILE = "execution-meta.json"
ARCHIVE_MANIFEST_FILE = "archive-manifest.json"
RECORDING_DIR = "recording"
BACKUP_PREFIX = ".hankweave.backup-"
CODON_LOG_SUFFIX = "-claude.log"
STDERR_LOG_SUFFIX = "-stderr.log"


def plain_name(name: str) -> bool:
    """Whether ``name`` (a run id, a codon id read from a state file) is one path component
    that stays where it is joined: not empty, ``.`` or ``..``, no separator, no NUL.  A reader
    of another execution's files (fork, compare) joins only such names."""
    return name not in ("", ".", "..") and "/" not in name and "\0" not in name


def codon_log_name(codon_id: str) -> str:
    """The log file name of a codon run: `review#1` -> `review-1-claude.log`."""
    return f"{codon_id.replace('#', '-')}{CODON_LOG_SUFFIX}"


def codon_stderr_name(codon_id: str) -> str:
    """The agent stderr file of a codon run: `review#1` -> `review-1-stderr.log`."""
    return f"{codon_id.replace('#', '-')}{STDERR_LOG_SUFFIX}"


@dataclass(frozen=True)
class ExecutionLayout:
    """The paths of one execution directory (made absolute, never resolved through symlinks)."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(os.path.abspath(self.path)))

    # -- outside .hankweave ------------------------------------------------------------------

    @property
    def agent_root(self) -> Path:
        """`agentRoot/`: the agent's working directory."""
        return self.path / AGENT_ROOT_DIR

    @property
    def data_link(self) -> Path:
        """`agentRoot/read_only_data_source`: the data source, linked or copied."""
        return self.agent_root / DATA_LINK

    @property
    def rig_archive(self) -> Path:
        """`rigArchive/`: where archiveOnSuccess moves files."""
        return self.path / RIG_ARCHIVE_DIR

    def backup_dir(self, timestamp: str) -> Path:
        """`.hankweave.backup-<timestamp>`: earlier state set aside by `-n --force`."""
        return self.path / f"{BACKUP_PREFIX}{timestamp}"

    # -- .hankweave ------------------------------------------------------------------------------

    @property
    def hankweave_dir(self) -> Path:
        return self.path / HANKWEAVE_DIR

    @property
    def state_file(self) -> Path:
        return self.hankweave_dir / STATE_FILE

    @property
    def state_backup_file(self) -> Path:
        return self.hankweave_dir / BACKUP_FILE

    @property
    def state_log_file(self) -> Path:
        """The append-only transition log folded into `state.json`."""
        return self.hankweave_dir / WAL_FILE

    @property
    def output_copy_marker(self) -> Path:
        """`.hankweave/output-copy.json`: the codon record whose output copy finished last."""
        return self.hankweave_dir / "output-copy.json"

    @property
    def events_dir(self) -> Path:
        return self.hankweave_dir / "events"

    @property
    def events_file(self) -> Path:
        """`.hankweave/events/events.jsonl`: the event journal."""
        return self.events_dir / "events.jsonl"

    @property
    def runs_dir(self) -> Path:
        return self.hankweave_dir / "runs"

    def run_folder(self, run_id: str) -> Path:
        """`.hankweave/runs/<runId>/`: the codon logs of one run."""
        return self.runs_dir / run_id

    def codon_log_path(self, run_id: str, codon_id: str) -> Path:
        """`.hankweave/runs/<runId>/<codonId>-claude.log`, with `#` in the id replaced by `-`."""
        return self.run_folder(run_id) / codon_log_name(codon_id)

    def codon_stderr_path(self, run_id: str, codon_id: str) -> Path:
        """`.hankweave/runs/<runId>/<codonId>-stderr.log`: the agent's stderr, next to its log."""
        return self.run_folder(run_id) / codon_stderr_name(codon_id)

    @property
    def harnesses_dir(self) -> Path:
        return self.hankweave_dir / "harnesses"

    def harness_state_dir(self, harness: str) -> Path:
        """`.hankweave/harnesses/<name>/`: a harness's own state, kept across runs."""
        return self.harnesses_dir / harness

    @property
    def checkpoints_dir(self) -> Path:
        return self.hankweave_dir / "checkpoints"

    @property
    def logs_dir(self) -> Path:
        return self.hankweave_dir / "logs"

    @property
    def server_log(self) -> Path:
        return self.logs_dir / "server.log"

    @property
    def mock_provider_log(self) -> Path:
        """The request log of a ``--mock-provider`` run's mock provider (JSONL)."""
        return self.hankweave_dir / "mock-provider" / "requests.jsonl"

    @property
    def proxy_log(self) -> Path:
        """The LLM proxy's request log (JSONL; ``--proxy``, docs/proxy.md)."""
        return self.hankweave_dir / "proxy" / "requests.jsonl"

    @property
    def mock_provider_script(self) -> Path:
        """The copy of the mock provider script the execution's runs use (``run-intent.json``)."""
        return self.hankweave_dir / "mock-provider" / "script.json"

    @property
    def run_intent_file(self) -> Path:
        """`.hankweave/run-intent.json`: the options that decide where and how agents run,
        reused by a resume (:mod:`hankweave.execution.intent`)."""
        return self.hankweave_dir / "run-intent.json"

    @property
    def result_file(self) -> Path:
        """`.hankweave/result.json`: the execution's stored result
        (:mod:`hankweave.execution.result`)."""
        return self.hankweave_dir / "result.json"

    @property
    def given_warnings_file(self) -> Path:
        """`.hankweave/warnings-given.json`: the harness warnings this execution has shown, each
        shown once (:mod:`hankweave.runtime.notices`)."""
        return self.hankweave_dir / "warnings-given.json"

    @property
    def socket_log(self) -> Path:
        return self.logs_dir / "websocket.log"

    @property
    def fork_marker(self) -> Path:
        """`.hankweave/forking`: the pid of the `hankweave fork` making this directory, removed
        once its metadata is written; a directory that still has it after that process is gone
        is what a killed fork left (docs/fork.md), and no run takes it."""
        return self.hankweave_dir / "forking"

    @property
    def meta_file(self) -> Path:
        """`.hankweave/execution-meta.json`: what this execution was created from."""
        return self.hankweave_dir / META_FILE

    @property
    def recording_dir(self) -> Path:
        """`.hankweave/recording/`: the recording a replay plays, kept so the execution can be
        resumed, inspected and exported after the recording's source is gone."""
        return self.hankweave_dir / RECORDING_DIR

    @property
    def archive_manifest(self) -> Path:
        return self.hankweave_dir / ARCHIVE_MANIFEST_FILE

    @property
    def lock_file(self) -> Path:
        """`.hankweave/runtime.lock`: one runtime per execution directory."""
        return self.hankweave_dir / LOCK_FILE_NAME

    @property
    def sentinels_dir(self) -> Path:
        return self.hankweave_dir / "sentinels"
