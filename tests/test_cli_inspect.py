"""``hankweave inspect state|thread``: read-only views of an execution's recorded state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from hankweave.checkpoints import Checkpoint, CheckpointStore
from hankweave.cli import cli
from hankweave.fsutil import utc_now_iso
from hankweave.hookspecs import hookimpl
from hankweave.plugins import get_plugin_manager
from hankweave.registry import get_registry
from hankweave.state.lock import RuntimeLock
from hankweave.state.types import HankweaveState, dump_state
from hankweave.testing.memory_checkpoints import MemoryCheckpointStore
from tests.state_builders import Scenario, plan, tokens, write_state

FIXTURES = Path(__file__).parent / "fixtures" / "state"
THREAD_KEYS = {"totalRuns", "hasRunningCodon", "failed", "nextCodonId", "codons"}
THREAD_CODON_KEYS = {
    "codonId",
    "status",
    "runId",
    "runStatus",
    "globalIndex",
    "runIndex",
    "codonIndexInRun",
    "continuationSessionId",
    "validatedCheckpoints",
}


def inspect(*args: str | Path) -> Result:
    # No COLUMNS: the commands pick their own width when stdout is not a terminal.
    runner = CliRunner(env={"COLUMNS": None})
    return runner.invoke(cli, ["inspect", *map(str, args)])


@pytest.fixture
def exec_dir(tmp_path: Path) -> Path:
    return tmp_path / "exec"


@pytest.fixture(autouse=True)
def memory_checkpoints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The command line sees one checkpoint backend, the in-memory one, and selects it."""
    monkeypatch.chdir(tmp_path)  # no hankweave.json of the repository's
    monkeypatch.setenv("HANKWEAVE_LOAD_PLUGINS", "")
    monkeypatch.setenv("HANKWEAVE_PLUGIN_MODULES", "hankweave.testing.memory_checkpoints")
    monkeypatch.setenv("HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND", "memory")
    get_plugin_manager.cache_clear()
    get_registry.cache_clear()
    yield
    get_plugin_manager.cache_clear()
    get_registry.cache_clear()


def resumed_execution() -> Scenario:
    """r1 completed a and failed b; r2 continues after a and is running b again."""
    s = Scenario(plan("a", "b", "c"))
    s.start_run("r1")
    s.complete("r1", "a", cost=1.0, used=tokens(100, 10), sha="aaaa1111bbbb2222")
    s.fail("r1", "b", cost=0.5, used=tokens(50, 5), message="rate limited by provider")
    s.end_run("r1", "failed")
    s.start_run("r2", parent="r1", after="a", sha="aaaa1111bbbb2222", reason="retry")
    s.start_codon("r2", "b").spend("r2", "b", 0.25, tokens(20, 2))
    return s


def completed_execution() -> Scenario:
    s = Scenario(plan("a", "b", "c"))
    s.start_run("r1").complete("r1", "a", cost=1.0).fail("r1", "b").end_run("r1", "failed")
    s.start_run("r2", parent="r1", after="a").complete("r2", "b", cost=2.0)
    return s


# ----- inspect state -----


def test_state_table_lists_runs_newest_first_with_codons_and_totals(exec_dir: Path) -> None:
    resumed_execution().write(exec_dir)

    result = inspect("state", "-e", exec_dir)

    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.index("Run r2") < out.index("Run r1")
    assert "continues r1 after a (checkpoint aaaa1111, retry)" in out
    for cell in ("completed", "failed", "running", "$1.0000", "$0.5000", "$0.2500", "aaaa1111"):
        assert cell in out
    assert "api-error: rate limited by provider" in out
    assert "Total: 2 runs, 3 codon records, cost $1.7500 (current run $0.2500)" in out
    assert "tokens in 170 out 17" in out
    assert result.stderr == ""


def test_state_table_of_an_execution_without_runs(exec_dir: Path) -> None:
    write_state(exec_dir, HankweaveState())

    result = inspect("state", "-e", exec_dir)

    assert result.exit_code == 0
    assert "No runs recorded." in result.stdout
    assert "Total: 0 runs, 0 codon records, cost $0.0000" in result.stdout


def test_state_json_prints_the_state_as_stored(exec_dir: Path) -> None:
    s = resumed_execution()
    s.write(exec_dir)

    result = inspect("state", "-e", exec_dir, "--json")

    assert result.exit_code == 0
    printed = json.loads(result.stdout)
    assert printed == json.loads(dump_state(s.state))
    assert list(printed)[:2] == ["runs", "currentRunId"]
    assert printed["runs"][0]["startingConditions"]["source"]["afterCodon"] == "a"


def test_seed_state_capture_loads_through_state_json(exec_dir: Path) -> None:
    fixture = FIXTURES / "seed-minimal-single-provider.json"
    (exec_dir / ".hankweave").mkdir(parents=True)
    (exec_dir / ".hankweave" / "state.json").write_bytes(fixture.read_bytes())

    result = inspect("state", "-e", exec_dir, "--json")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == json.loads(fixture.read_text())
    table = inspect("state", "-e", exec_dir)
    assert "summarize-notes" in table.stdout and "$0.0105" in table.stdout


# ----- inspect thread -----


@contextmanager
def live_runtime(exec_dir: Path, run_id: str) -> Iterator[None]:
    """A live runtime's lock on the execution (this process, a fresh heartbeat)."""
    lock = RuntimeLock(exec_dir / ".hankweave")
    lock.acquire(run_id)
    try:
        yield
    finally:
        lock.release()


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def files_of(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_thread_json_has_exactly_the_documented_shape(exec_dir: Path) -> None:
    resumed_execution().write(exec_dir)

    with live_runtime(exec_dir, "r2"):
        result = inspect("thread", "-e", exec_dir, "--json")

    assert result.exit_code == 0
    printed = json.loads(result.stdout)
    assert set(printed) == THREAD_KEYS
    assert (printed["totalRuns"], printed["hasRunningCodon"], printed["failed"]) == (2, True, False)
    assert printed["nextCodonId"] is None  # a codon is running
    assert [set(codon) for codon in printed["codons"]] == [THREAD_CODON_KEYS] * 2
    assert printed["codons"][0] == {
        "codonId": "b",
        "status": "running",
        "runId": "r2",
        "runStatus": "running",
        "globalIndex": 0,
        "runIndex": 0,
        "codonIndexInRun": 0,
        "continuationSessionId": None,
        "validatedCheckpoints": [],  # b records no checkpoint yet
    }
    assert printed["codons"][1]["codonId"] == "a"
    assert printed["codons"][1]["runIndex"] == 1


@pytest.mark.parametrize("lock", ["absent", "dead process", "stale heartbeat"])
def test_thread_shows_a_running_run_whose_runtime_is_gone_crashed(
        exec_dir: Path, lock: str) -> None:
    resumed_execution().write(exec_dir)
    hankweave_dir = exec_dir / ".hankweave"
    if lock != "absent":
        pid = dead_pid() if lock == "dead process" else os.getpid()
        beat = "2020-01-01T00:00:00.000Z" if lock == "stale heartbeat" else utc_now_iso()
        (hankweave_dir / "runtime.lock").write_text(json.dumps(
            {"pid": pid, "lockId": "x", "runId": "r2", "lastHeartbeat": beat}))
    before = files_of(hankweave_dir)

    result = inspect("thread", "-e", exec_dir, "--json")

    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert (printed["hasRunningCodon"], printed["failed"]) == (False, True)
    newest = printed["codons"][0]
    assert (newest["codonId"], newest["status"], newest["runStatus"]) == ("b", "failed", "crashed")
    assert printed["codons"][1]["runStatus"] == "failed"  # r1 ended before: as recorded
    table = inspect("thread", "-e", exec_dir)
    rows = table.stdout.split("\n2 codons across")[0]
    assert "crashed" in rows and "running" not in rows
    assert files_of(hankweave_dir) == before  # read-only: the repair is only shown


def test_execution_document_shows_a_run_whose_runtime_is_gone_crashed(exec_dir: Path) -> None:
    resumed_execution().write(exec_dir)

    gone = json.loads(inspect("execution", "-e", exec_dir, "--json").stdout)
    with live_runtime(exec_dir, "r2"):
        live = json.loads(inspect("execution", "-e", exec_dir, "--json").stdout)

    assert (gone["execution"]["status"], gone["runs"][0]["status"]) == ("crashed", "crashed")
    assert (live["execution"]["status"], live["runs"][0]["status"]) == ("running", "running")


def test_thread_with_an_unreadable_lock_is_shown_as_stored_with_a_warning(
        exec_dir: Path) -> None:
    resumed_execution().write(exec_dir)
    (exec_dir / ".hankweave" / "runtime.lock").write_text("not a lock")

    result = inspect("thread", "-e", exec_dir, "--json")

    assert result.exit_code == 0
    assert json.loads(result.stdout)["codons"][0]["runStatus"] == "running"
    assert "cannot tell whether a runtime still runs this execution" in result.stderr


def test_thread_table_shows_codons_and_the_next_codon(exec_dir: Path) -> None:
    completed_execution().write(exec_dir)

    result = inspect("thread", "-e", exec_dir)

    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert any("b" in line and "r2" in line and "completed" in line for line in lines)
    assert "2 codons across 2 runs; next codon: c; failed: no; running codon: no" in result.stdout


def test_thread_table_prints_codon_ids_literally(exec_dir: Path) -> None:
    s = Scenario(plan("[bold]a", "review#0"))
    s.start_run("r1").complete("r1", "[bold]a")
    s.write(exec_dir)

    result = inspect("thread", "-e", exec_dir)

    assert "[bold]a" in result.stdout
    assert "next codon: review#0" in result.stdout


def test_thread_run_option_ends_the_thread_at_an_older_run(exec_dir: Path) -> None:
    completed_execution().write(exec_dir)

    result = inspect("thread", "-e", exec_dir, "--run", "r1", "--json")

    printed = json.loads(result.stdout)
    assert [(c["codonId"], c["status"]) for c in printed["codons"]] == [
        ("b", "failed"),
        ("a", "completed"),
    ]
    assert printed["failed"] is True
    assert printed["nextCodonId"] is None


def test_thread_of_an_execution_without_runs(exec_dir: Path) -> None:
    write_state(exec_dir, HankweaveState())

    human = inspect("thread", "-e", exec_dir)
    as_json = json.loads(inspect("thread", "-e", exec_dir, "--json").stdout)

    assert "The thread has no codons." in human.stdout
    assert as_json == {
        "totalRuns": 0,
        "hasRunningCodon": False,
        "failed": False,
        "nextCodonId": None,
        "codons": [],
    }


# ----- checkpoints from the checkpoint store -----


def checkpointed_execution(exec_dir: Path) -> tuple[Checkpoint, Checkpoint]:
    """r1 ran a, whose rig-setup and completion checkpoints the store holds, and b, whose
    completion checkpoint it no longer holds.  Returns a's two checkpoints."""
    store = MemoryCheckpointStore(exec_dir)
    store.initialize()
    made = [store.create(kind=kind, run_id="r1", codon_id="a", codon_name="A", patterns=())
            for kind in ("rig-setup", "completed")]
    s = Scenario(plan("a", "b", "c"))
    s.start_run("r1").complete("r1", "a", rig=made[0].id, sha=made[1].id)
    s.complete("r1", "b", sha="0123456789abcdef0123456789abcdef01234567")
    s.write(exec_dir)
    return made[0], made[1]


def as_info(checkpoint: Checkpoint) -> dict[str, Any]:
    return {"type": checkpoint.kind, "sha": checkpoint.id, "message": checkpoint.message,
            "timestamp": checkpoint.timestamp, "branch": checkpoint.branch}


def test_thread_table_shows_each_codons_checkpoints_the_store_holds(exec_dir: Path) -> None:
    rig, done = checkpointed_execution(exec_dir)

    result = inspect("thread", "-e", exec_dir)

    assert result.exit_code == 0, result.output
    rows = {line.split()[2]: line for line in result.stdout.splitlines()
            if line.split()[:1] in (["0"], ["1"])}
    assert rows["a"].rstrip().endswith(f"rig-setup {rig.id[:8]}, completed {done.id[:8]}")
    assert rows["b"].rstrip().endswith("│ -")


def test_thread_json_lists_the_checkpoints_the_store_holds(exec_dir: Path) -> None:
    rig, done = checkpointed_execution(exec_dir)

    result = inspect("thread", "-e", exec_dir, "--json")

    assert result.exit_code == 0, result.output
    checkpoints = {c["codonId"]: c["validatedCheckpoints"]
                   for c in json.loads(result.stdout)["codons"]}
    assert checkpoints == {"a": [as_info(rig), as_info(done)], "b": []}
    assert result.stderr == ""


def test_a_store_holding_none_of_the_recorded_checkpoints_is_a_warning(exec_dir: Path) -> None:
    completed_execution().write(exec_dir)  # the memory store of exec_dir is empty

    result = inspect("thread", "-e", exec_dir, "--json")

    assert result.exit_code == 0, result.output
    assert [c["validatedCheckpoints"] for c in json.loads(result.stdout)["codons"]] == [[], []]
    assert result.stderr.startswith("warning: none of the 2 checkpoints state records is in"
                                    ' the "memory" checkpoint store')
    assert "another checkpoints.backend" in result.stderr


def test_an_uninstalled_backend_is_a_warning_and_the_thread_is_still_shown(
    exec_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND", "nope")
    completed_execution().write(exec_dir)

    result = inspect("thread", "-e", exec_dir, "--json")

    assert result.exit_code == 0, result.output
    assert [c["codonId"] for c in json.loads(result.stdout)["codons"]] == ["b", "a"]
    assert result.stderr.splitlines() == [
        'warning: checkpoints not shown: Checkpoint backend "nope" is not installed (installed:'
        " memory); install it with: pip install hankweave-checkpoint-nope"]


class OpenOnlyStore(MemoryCheckpointStore):
    """A backend written before ``list_read_only``: it keeps the default."""

    name = "open-only"
    list_read_only = CheckpointStore.list_read_only


class OpenOnlyPlugin:
    @hookimpl
    def register_checkpoint_backends(self, register: Any) -> None:
        register(OpenOnlyStore)


def test_a_backend_that_cannot_list_read_only_is_not_opened(
    exec_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig, _ = checkpointed_execution(exec_dir)
    get_plugin_manager().register(OpenOnlyPlugin(), name="open-only")
    monkeypatch.setenv("HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND", "open-only")

    result = inspect("thread", "-e", exec_dir)

    assert result.exit_code == 0, result.output
    assert rig.id[:8] not in result.stdout
    assert result.stderr == (
        'warning: checkpoints not shown: the "open-only" checkpoint backend cannot list its'
        " checkpoints without opening its store\n")


# ----- errors -----


def assert_one_line_error(result: Result, *fragments: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    for fragment in fragments:
        assert fragment in lines[0]


@pytest.mark.parametrize("command", ["state", "thread"])
def test_missing_execution_directory_is_one_error_line(command: str, exec_dir: Path) -> None:
    result = inspect(command, "-e", exec_dir, "--json")

    assert_one_line_error(result, str(exec_dir), "does not exist")


@pytest.mark.parametrize("command", ["state", "thread"])
def test_missing_state_file_is_one_error_line(command: str, exec_dir: Path) -> None:
    exec_dir.mkdir()

    result = inspect(command, "-e", exec_dir)

    assert_one_line_error(result, str(exec_dir / ".hankweave" / "state.json"), "no such file")


@pytest.mark.parametrize("command", ["state", "thread"])
@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b'{"runs": [', "Invalid JSON"),
        (b'{"runs": [{"runId": 7}], "currentRunId": null, "executionPlan": []}', "runs.0.runId"),
    ],
)
def test_corrupt_state_file_is_one_error_line(
    command: str, content: bytes, problem: str, exec_dir: Path
) -> None:
    path = exec_dir / ".hankweave" / "state.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(content)

    result = inspect(command, "-e", exec_dir)

    assert_one_line_error(result, str(path), "not a valid state", problem)


def test_unknown_run_is_one_error_line(exec_dir: Path) -> None:
    completed_execution().write(exec_dir)

    result = inspect("thread", "-e", exec_dir, "--run", "nope")

    assert_one_line_error(result, "'nope'", "state.json")


def test_corrupt_state_file_with_a_good_backup_warns_on_stderr_only(exec_dir: Path) -> None:
    s = completed_execution()
    path = s.write(exec_dir)
    (path.parent / "state.json.bak").write_bytes(path.read_bytes())
    path.write_bytes(b"{ torn")

    result = inspect("state", "-e", exec_dir, "--json")

    assert result.exit_code == 0
    assert json.loads(result.stdout) == json.loads(dump_state(s.state))
    assert "loaded state.json.bak" in result.stderr


# ----- the transition log -----

_KILLED_WRITER = """
import os, sys
from pathlib import Path
from hankweave.state.store import StateStore
from hankweave.state.transitions import parse_transition

store = StateStore.open(Path(sys.argv[1]))
for line in sys.stdin.read().splitlines():
    store.transition_sync(parse_transition(line))
os._exit(0)  # killed: the log is never folded into state.json
"""


def write_with_log_tail(exec_dir: Path) -> Scenario:
    """Write state.json after r1's first codon, then log the rest as a killed runtime would."""
    s = Scenario(plan("a", "b", "c"))
    s.start_run("r1").complete("r1", "a", cost=1.0)
    s.write(exec_dir)
    folded = len(s.transitions)
    s.complete("r1", "b", cost=2.0)
    tail = "\n".join(t.model_dump_json(exclude_none=True) for t in s.transitions[folded:])
    subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, str(exec_dir / ".hankweave")],
        input=tail,
        text=True,
        check=True,
    )
    return s


def test_inspect_includes_the_transition_log_tail(exec_dir: Path) -> None:
    s = write_with_log_tail(exec_dir)
    on_disk = json.loads((exec_dir / ".hankweave" / "state.json").read_text())
    assert len(on_disk["runs"][0]["codons"]) == 1  # b exists only in the log

    state_json = inspect("state", "-e", exec_dir, "--json")
    thread_json = json.loads(inspect("thread", "-e", exec_dir, "--json").stdout)

    assert json.loads(state_json.stdout) == json.loads(dump_state(s.state))
    assert [c["codonId"] for c in thread_json["codons"]] == ["b", "a"]
    assert thread_json["nextCodonId"] == "c"
    assert "Total: 1 run, 2 codon records, cost $3.0000" in inspect("state", "-e", exec_dir).stdout


def test_torn_log_line_warns_on_stderr_and_keeps_stdout_pure_json(exec_dir: Path) -> None:
    s = write_with_log_tail(exec_dir)
    with open(exec_dir / ".hankweave" / "state.wal", "ab") as wal:
        wal.write(b'{"type": "CostsUpdated", "da')

    result = inspect("state", "-e", exec_dir, "--json")

    assert result.exit_code == 0
    assert json.loads(result.stdout) == json.loads(dump_state(s.state))
    assert "torn last line" in result.stderr


# ----- read-only -----


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its modification time and size."""
    entries = {}
    for path in [root, *root.rglob("*")]:
        stat = path.stat()
        entries[str(path.relative_to(root))] = (stat.st_mtime_ns, stat.st_size)
    return entries


def test_inspect_writes_nothing(exec_dir: Path) -> None:
    write_with_log_tail(exec_dir)
    hankweave_dir = exec_dir / ".hankweave"
    (hankweave_dir / "state.json.bak").write_bytes((hankweave_dir / "state.json").read_bytes())
    before = snapshot(exec_dir)

    for args in (["state"], ["state", "--json"], ["thread"], ["thread", "--json"]):
        result = inspect(*args, "-e", exec_dir)
        assert result.exit_code == 0, result.output

    assert snapshot(exec_dir) == before


def test_inspect_imports_no_heavy_library(exec_dir: Path) -> None:
    completed_execution().write(exec_dir)
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from hankweave.cli import cli\n"
        "for command in ('state', 'thread'):\n"
        "    result = CliRunner().invoke(cli, ['inspect', command, '-e', sys.argv[1]])\n"
        "    assert result.exit_code == 0, result.output\n"
        "heavy = ('litellm', 'anthropic', 'claude_agent_sdk', 'git')\n"
        "print(sorted(name for name in heavy if name in sys.modules))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSTARTUP"}

    out = subprocess.run(
        [sys.executable, "-c", code, str(exec_dir)], capture_output=True, text=True, env=env
    )

    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_a_cost_with_unpriced_usage_is_shown_as_a_lower_bound(exec_dir: Path) -> None:
    state = completed_execution().state
    run = state.runs[0]
    unpriced = run.codons[-1].model_copy(update={"cost_complete": False})
    state = state.model_copy(update={"runs": [
        run.model_copy(update={"codons": [*run.codons[:-1], unpriced]}), *state.runs[1:]]})
    write_state(exec_dir, state)

    result = inspect("state", "-e", exec_dir)

    assert result.exit_code == 0, result.output
    assert "$2.0000+" in result.output
    assert "lower bound" in result.output
    assert "costComplete" in result.output


def test_the_document_every_reader_builds_shows_a_run_whose_runtime_is_gone_crashed(
        exec_dir: Path) -> None:
    """document_of is what the dashboard and an executor's status read, not only inspect."""
    from hankweave.execution.document import document_of
    from hankweave.state.store import load_state

    resumed_execution().write(exec_dir)
    state = load_state(exec_dir / ".hankweave")[0]

    gone = document_of(exec_dir, state)
    with live_runtime(exec_dir, "r2"):
        live = document_of(exec_dir, state)

    assert (gone.execution.status, gone.runs[0].status) == ("crashed", "crashed")
    assert (live.execution.status, live.runs[0].status) == ("running", "running")
