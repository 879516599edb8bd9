"""What replay and export refuse or warn about, in real processes: missing, truncated and torn
logs, a changed hank, secrets, a running execution."""

from __future__ import annotations

import json
import tarfile

from integration.conftest import codon
from integration.test_replay_roundtrip import export, facts, replay, state_of

FILES = ["**"]


def record_three(project):
    project.write_hank([codon("a", checkpointedFiles=FILES), codon("b"), codon("c")])
    project.write_script({"a": {"writeFiles": {"a.md": "alpha"}, "messages": 2},
                          "b": {"writeFiles": {"b.md": "beta"}}, "c": {}})
    assert project.run().returncode == 0
    return {c.codon_id: project.exec_dir / c.claude_log_path
            for c in state_of(project.exec_dir).runs[0].codons}


def test_missing_logs_are_listed_before_anything_runs(project):
    logs = record_three(project)
    logs["b"].unlink()
    logs["c"].unlink()

    result, target = replay(project, project.exec_dir)

    assert result.returncode == 2
    assert "2 codon log(s) not found in the recording: b, c" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (target / ".hankweave" / "state.json").exists()


def test_a_recording_exported_without_a_log_says_so_and_refuses_to_replay(project):
    logs = record_three(project)
    logs["a"].unlink()

    exported = project.hw("export", "-e", str(project.exec_dir), "-o",
                          str(project.root / "r.hwrec.tar.gz"))
    assert exported.returncode == 0
    assert "log of codon a" in exported.stdout

    result, _ = replay(project, project.root / "r.hwrec.tar.gz")
    assert result.returncode == 2
    assert "1 codon log(s) not found in the recording: a" in result.stderr


def test_a_truncated_log_fails_its_codon_with_a_clear_reason(project):
    logs = record_three(project)
    lines = logs["b"].read_text().splitlines(keepends=True)
    assert json.loads(lines[-1])["type"] == "result"
    logs["b"].write_text("".join(lines[:-1]))

    result, target = replay(project, export(project))

    assert result.returncode != 0
    assert "ends without a result record" in result.stderr
    replayed = facts(state_of(target))
    assert replayed["a"] == facts(state_of(project.exec_dir))["a"]
    assert replayed["b"]["status"] == "failed"
    assert "exited without a result message" in replayed["b"]["failure"][1]
    assert "c" not in replayed


def test_a_torn_last_line_and_unknown_records_replay_with_warnings(project):
    logs = record_three(project)
    lines = logs["a"].read_text().splitlines(keepends=True)
    lines.insert(1, json.dumps({"type": "telemetry", "ping": 1}) + "\n")
    logs["a"].write_text("".join(lines) + '{"type":"assistant","message":{"id":"msg_x"')

    result, target = replay(project, export(project))

    assert result.returncode == 0, result.stderr
    assert "torn last line" in result.stderr
    assert "telemetry" in result.stderr
    assert facts(state_of(target)) == facts(state_of(project.exec_dir))


def test_a_hank_with_a_codon_added_is_refused(project):
    record_three(project)
    source = export(project)
    changed = project.root / "changed"
    changed.mkdir()
    hank = json.loads((project.hank_dir / "hank.json").read_text())
    hank["hank"].append(codon("d"))
    (changed / "hank.json").write_text(json.dumps(hank))

    result, target = replay(project, source, "replayed", str(changed))

    assert result.returncode == 2
    assert "1 codon log(s) not found in the recording: d" in result.stderr
    assert "another version of this hank" in result.stderr
    assert not (target / ".hankweave" / "state.json").exists()


def test_secrets_never_reach_the_archive(project):
    secret = "sk-ant-test123"
    project.env["ANTHROPIC_API_KEY"] = secret
    project.write_hank([codon("a", checkpointedFiles=FILES)])
    project.write_script({"a": {"text": f"The key is {secret}.",
                                "writeFiles": {"env.txt": f"ANTHROPIC_API_KEY={secret}\n"}}})
    assert project.run().returncode == 0
    log = project.exec_dir / state_of(project.exec_dir).runs[0].codons[0].claude_log_path
    assert secret in log.read_text()  # the agent did echo it

    with tarfile.open(export(project)) as tar:
        for member in tar:
            assert ".git" not in member.name.split("/")
            assert "runtime.lock" not in member.name and "server.log" not in member.name
            if member.isfile():
                assert secret.encode() not in tar.extractfile(member).read(), member.name


def test_export_refuses_a_running_execution(project):
    project.write_hank([codon("a")])
    project.write_script({"a": {"hang": True}})
    running = project.start()
    try:
        project.wait_for(lambda s: bool(s.runs and s.runs[0].codons)
                         and s.runs[0].codons[0].status == "running")
        result = project.hw("export", "-e", str(project.exec_dir), "-o",
                            str(project.root / "r.hwrec.tar.gz"))
        assert result.returncode == 2
        assert "in use by a running hankweave runtime" in result.stderr
        assert not (project.root / "r.hwrec.tar.gz").exists()
    finally:
        running.kill()
        running.wait(timeout=30)
