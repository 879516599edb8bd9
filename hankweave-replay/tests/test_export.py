"""``export_recording`` and ``hankweave export``: what a recording holds, and what it never holds."""

from __future__ import annotations

import json
import os
import tarfile

import pytest
from click.testing import CliRunner
from replay_helpers import codon

import hankweave_replay
from hankweave.api import LockInfo, utc_now_iso
from hankweave_replay import staging

FILES = ["**"]


def members(path):
    with tarfile.open(path) as tar:
        return {m.name: (tar.extractfile(m).read() if m.isfile() else None) for m in tar}


def recorded(project, script=None, items=None):
    project.write_hank(items or [codon("a", checkpointedFiles=FILES), codon("b")])
    outcome = project.record(script or {"a": {"writeFiles": {"a.md": "alpha"}},
                                        "b": {"writeFiles": {"b.md": "beta"}}})
    assert outcome.code == 0, outcome.notices
    return outcome


def test_a_recording_holds_manifest_state_meta_hank_data_logs_and_snapshots(project):
    project.write_hank([codon("a", checkpointedFiles=FILES, promptFile="prompts/a.md")])
    (project.hank_dir / "prompts").mkdir()
    (project.hank_dir / "prompts" / "a.md").write_text("Do a.")
    outcome = project.record({"a": {"writeFiles": {"out/a.md": "alpha"}}})
    run = outcome.state.runs[0]

    result = project.export()

    files = members(result.path)
    record = run.codons[0]
    assert {"recording.json", "state.json", "execution-meta.json", "hank/hank.json",
            "hank/prompts/a.md", "data/input.txt", f"logs/{run.run_id}/a-claude.log",
            f"snapshots/{record.completion_checkpoint}/out/a.md"} <= set(files)
    manifest = json.loads(files["recording.json"])
    assert manifest["format"] == "hankweave-recording" and manifest["formatVersion"] == 1
    assert manifest["complete"] is True and manifest["checkpointBackend"] == "memory"
    assert manifest["codons"] == [{
        "codonId": "a", "runId": run.run_id, "status": "completed",
        "log": f"logs/{run.run_id}/a-claude.log", "snapshot": record.completion_checkpoint,
        "checkpointPatterns": ["**"]}]
    assert files[f"logs/{run.run_id}/a-claude.log"] == \
        (outcome.exec_dir / record.claude_log_path).read_bytes()


def test_recorded_paths_are_neutral(project):
    recorded(project)
    files = members(project.export().path)
    meta = json.loads(files["execution-meta.json"])
    assert meta["hankPath"] == "hank/hank.json"
    assert meta["readOnlySourceDataPath"] == "data"
    assert "readOnlySourceResolvedDataPath" not in meta
    state = json.loads(files["state.json"])
    assert state["runs"][0]["runFolder"] == f".hankweave/runs/{state['runs'][0]['runId']}"
    for name in ("execution-meta.json", "state.json", "recording.json"):
        assert str(project.root).encode() not in files[name], name


def test_no_lock_server_log_journal_git_or_dotfiles(project):
    recorded(project)
    (project.hank_dir / ".env").write_text("SECRET=1")
    (project.hank_dir / ".git").mkdir()
    (project.hank_dir / ".git" / "config").write_text("[core]")
    (project.hank_dir / "__pycache__").mkdir()
    (project.hank_dir / "__pycache__" / "x.pyc").write_bytes(b"\0")
    # A stale lock (its process is gone) does not stop an export, and is never copied.
    lock = LockInfo(pid=2**22 + 12345, lockId="x", startTime=utc_now_iso(),
                    lastHeartbeat=utc_now_iso(), token="control-token-123456")
    (project.exec_dir / ".hankweave" / "runtime.lock").write_bytes(lock.to_json_bytes())

    files = members(project.export().path)

    names = set(files)
    assert not [n for n in names if "runtime.lock" in n or "server.log" in n
                or "events" in n or "/." in f"/{n}" or "__pycache__" in n], names
    assert not any(b"control-token-123456" in (data or b"") for data in files.values())


def test_secrets_are_scrubbed_from_every_file(project):
    secret_key = "sk-ant-test123"
    other = "hunter2-but-longer"
    recorded(project, script={
        "a": {"text": f"my key is {secret_key} and my token is {other}",
              "writeFiles": {"a.md": f"key={secret_key}", "b.md": "sk-proj-abcdefghijklmnopqrst"}},
        "b": {"errorText": f"leaked {other}"}})
    project.env.update(ANTHROPIC_API_KEY=secret_key, MY_SERVICE_TOKEN=other)

    result = project.export()

    files = members(result.path)
    for name, data in files.items():
        for leaked in (secret_key, other, "sk-proj-abcdefghijklmnopqrst"):
            assert leaked.encode() not in (data or b""), f"{leaked} in {name}"
    assert result.redactions >= 4
    assert result.redactions == sum(result.manifest.redactions_by_kind.values())
    assert any("[REDACTED:<kind>]" in note for note in result.manifest.notes)
    log = next(data for name, data in files.items() if name.endswith("a-claude.log"))
    for line in log.decode().splitlines():
        json.loads(line)  # still one JSON object per line
    assert b"[REDACTED:provider-key]" in log and b"[REDACTED:env]" in log


def test_words_containing_sk_survive(project):
    recorded(project, script={"a": {"text": "the task-abcdefghijklmnopqrstu is done"}})
    files = members(project.export().path)
    log = next(data for name, data in files.items() if name.endswith("a-claude.log"))
    assert b"task-abcdefghijklmnopqrstu" in log


def test_export_refuses_while_a_runtime_holds_the_lock(project):
    recorded(project)
    lock = LockInfo(pid=os.getpid(), lockId="live", startTime=utc_now_iso(),
                    lastHeartbeat=utc_now_iso())
    (project.exec_dir / ".hankweave" / "runtime.lock").write_bytes(lock.to_json_bytes())

    with pytest.raises(hankweave_replay.RecordingError, match="in use by a running hankweave"):
        project.export()
    assert not (project.root / "rec.hwrec.tar.gz").exists()


def test_export_refuses_what_is_not_an_execution(project, tmp_path):
    with pytest.raises(hankweave_replay.RecordingError, match="not an execution directory"):
        hankweave_replay.export_recording(tmp_path / "nothing", env=project.env, cwd=tmp_path)


def test_export_refuses_when_the_hank_is_gone(project):
    recorded(project)
    (project.hank_dir / "hank.json").unlink()
    with pytest.raises(hankweave_replay.RecordingError, match="no longer exists"):
        project.export()


def test_large_data_is_left_out_with_a_note(project, monkeypatch):
    recorded(project)
    monkeypatch.setattr(staging, "MAX_DATA_BYTES", 4)
    result = project.export()
    assert result.manifest.data is None
    assert not [n for n in members(result.path) if n.startswith("data/")]
    assert any("larger than" in note for note in result.manifest.notes)


def test_large_hank_files_and_links_are_left_out_with_a_note(project, monkeypatch):
    recorded(project)
    (project.hank_dir / "big.bin").write_bytes(b"x" * 100)
    (project.hank_dir / "link.md").symlink_to(project.hank_dir / "hank.json")
    monkeypatch.setattr(staging, "MAX_HANK_FILE_BYTES", 50)
    result = project.export()
    names = members(result.path)
    assert "hank/big.bin" not in names and "hank/link.md" not in names
    assert any("big.bin" in note and "link.md" in note for note in result.manifest.notes)


def test_a_workspace_link_leaving_the_workspace_is_left_out(project):
    project.write_hank([codon("a", checkpointedFiles=FILES, rigSetup=[
        {"type": "command", "command": {"run": "ln -s /etc/hostname out.txt && ln -s a.md in"}}])])
    assert project.record({"a": {"writeFiles": {"a.md": "alpha"}}}).code == 0

    result = project.export()

    names = members(result.path)
    assert not [n for n in names if n.endswith("/out.txt")]
    assert [n for n in names if n.endswith("/in")]  # a link inside the workspace is kept
    assert any("out.txt" in note for note in result.manifest.notes)


def test_chained_workspace_links_leaving_the_workspace_are_left_out(project):
    # Each link's text stays inside; followed, p climbs out. Kept, it would make the
    # recording one that opening refuses.
    climb = "/".join(["q"] * 12 + [".."] * 12)
    project.write_hank([codon("a", checkpointedFiles=FILES, rigSetup=[
        {"type": "command", "command": {"run": f"ln -s . q && ln -s {climb} p"}}])])
    assert project.record({"a": {"writeFiles": {"a.md": "alpha"}}}).code == 0

    result = project.export()

    names = members(result.path)
    assert not [n for n in names if n.endswith("/p")]
    assert [n for n in names if n.endswith("/q")]
    assert any(" p " in note for note in result.manifest.notes)
    hankweave_replay.ReplayHarness.open_recording(result.path).close()


def test_an_unfinished_recording_says_so(project):
    project.write_hank([codon("a"), codon("b"), codon("c")])
    assert project.record({"b": {"result": "error", "errorText": "API Error: 401"}}).code != 0
    manifest = project.export().manifest
    assert manifest.complete is False
    assert [(c.codon_id, c.status) for c in manifest.codons] == [("a", "completed"),
                                                                 ("b", "failed")]


def test_the_export_command(project, monkeypatch):
    recorded(project)
    for key, value in project.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(project.root)

    result = CliRunner().invoke(hankweave_replay.export_command, ["-e", "exec"])

    assert result.exit_code == 0, result.output
    assert (project.root / f"exec{hankweave_replay.RECORDING_SUFFIX}").is_file()
    assert "2 codon(s), 2 workspace snapshot(s)" in result.output
    assert "hankweave replay" in result.output


def test_the_export_command_reports_errors_in_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(hankweave_replay.export_command, ["-e", "missing"])
    assert result.exit_code == 2
    assert "Cannot export missing" in result.output and "Traceback" not in result.output


def test_a_bundle_run_exports_its_bundle_hash_and_lock_and_replays(project):
    from pathlib import Path

    from hankweave.api import pack_hank
    from hankweave.testing.fake_harness import use_script

    project.write_file("prompts/a.md", "Do a.")
    project.write_hank([codon("a", checkpointedFiles=FILES, promptFile="prompts/a.md")])
    packed = pack_hank(project.hank_dir, output=Path("a.hank"), cwd=project.root)
    use_script({"codons": {"a": {"writeFiles": {"a.md": "alpha"}}}})
    outcome = project._launch(hank=str(packed.output), data=str(project.data),
                              execution=project.exec_dir)
    assert outcome.code == 0, outcome.notices

    files = members(project.export().path)

    manifest = json.loads(files["recording.json"])
    meta = json.loads(files["execution-meta.json"])
    assert manifest["bundleHash"] == meta["bundleHash"] == packed.lock.bundle_hash
    assert meta["bundlePath"] == "a.hank"  # its name: no path of the recording machine
    assert json.loads(files["hank/hank.lock"])["bundleHash"] == packed.lock.bundle_hash
    assert files["hank/prompts/a.md"] == b"Do a."
    replayed = project.replay()
    assert replayed.code == 0, replayed.notices
    assert replayed.work_tree["a.md"] == b"alpha"
