"""Issue 34 item 4: an export someone sends on holds none of the secrets of the execution.

One real execution (FakeHarness agent, git checkpoints) whose codon has an ``env`` password and
whose agent printed a provider key the exporting shell does not hold, a GitHub token, a
``Bearer`` header and a URL with a password, into its log and into a checkpointed file.  Each
test exports it with the real ``hankweave export`` and reads every member of the archive.
"""

from __future__ import annotations

import json
import re
import tarfile
from collections import Counter
from pathlib import Path

import pytest

from tests.security.support import Project, codon, needs

DB_PASSWORD = "hunter2"  # short: redacted because of its name, not its length
PROVIDER_KEY = "abc123longvalue"  # no known shape: only its recorded assignment gives it away
GITHUB_TOKEN = "ghp_" + "A1b2C3d4E5" * 4
BEARER = "eyJhbGciOi1234567890abcdef"
URL_PASSWORD = "pa55w0rd-url"
SECRETS = {
    "codon env password": DB_PASSWORD,
    "provider key": PROVIDER_KEY,
    "github token": GITHUB_TOKEN,
    "bearer token": BEARER,
    "url password": URL_PASSWORD,
}
AGENT_TEXT = (
    f"I ran `export OPENAI_API_KEY={PROVIDER_KEY}` and connected as admin with {DB_PASSWORD}."
    f" Pushed with {GITHUB_TOKEN} and sent 'Authorization: Bearer {BEARER}' to"
    f" https://admin:{URL_PASSWORD}@db.example.com/app; the key {PROVIDER_KEY} works.")
KEY_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GITHUB_TOKEN", "DB_PASSWORD")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Project:
    needs("git", "replay")
    project = Project(tmp_path_factory.mktemp("secrets"))
    for name in KEY_VARIABLES:  # the exporting shell holds none of them
        project.env.pop(name, None)
    project.write_hank([codon("deploy", env={"DB_PASSWORD": DB_PASSWORD, "DEBUG": "1"},
                              checkpointedFiles=["*.md"])])
    project.write_script({"deploy": {"text": AGENT_TEXT,
                                     "writeFiles": {"notes.md": AGENT_TEXT}}})
    result = project.run()
    assert result.returncode == 0, result.stderr
    return project


def export(project: Project, name: str, *extra: str) -> tuple[Path, str]:
    archive = project.root / f"{name}.hwrec.tar.gz"
    result = project.hw("export", "-e", str(project.exec_dir), "-o", str(archive), *extra)
    assert result.returncode == 0, result.stderr
    return archive, result.stdout + result.stderr


def members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]


def leaks(archive: Path) -> list[str]:
    return [f"{what} in {name}" for name, data in members(archive).items()
            for what, secret in SECRETS.items() if secret.encode() in data]


def test_the_recorded_execution_holds_every_secret(recorded):
    # The premise: without redaction each secret is there to leak.
    on_disk = b"".join(p.read_bytes() for p in recorded.exec_dir.rglob("*") if p.is_file())
    assert all(secret.encode() in on_disk for secret in SECRETS.values())


def test_export_holds_no_codon_env_secret(recorded):
    archive, _ = export(recorded, "env")
    assert not [leak for leak in leaks(archive) if leak.startswith("codon env password")]
    hank = json.loads(members(archive)["hank/hank.json"])
    assert hank["hank"][0]["env"] == {"DB_PASSWORD": "[REDACTED:env]", "DEBUG": "1"}


def test_export_holds_no_provider_key_known_only_from_the_recording(recorded):
    archive, _ = export(recorded, "provider")
    assert not [leak for leak in leaks(archive) if leak.startswith("provider key")]
    log = next(data for name, data in members(archive).items() if name.startswith("logs/"))
    assert b"OPENAI_API_KEY=[REDACTED:provider-key]" in log
    assert b"the key [REDACTED:provider-key] works" in log  # learned, then redacted everywhere


def test_export_holds_no_token_printed_in_a_codon_log(recorded):
    archive, _ = export(recorded, "tokens")
    assert leaks(archive) == []
    data = b"".join(members(archive).values())
    assert b"Bearer [REDACTED:token]" in data
    assert b"https://admin:[REDACTED:url-credentials]@db.example.com/app" in data


def test_export_prints_and_records_how_many_of_each_kind_it_redacted(recorded):
    archive, output = export(recorded, "counts")
    contents = members(archive)
    manifest = json.loads(contents["recording.json"])
    in_archive = Counter(kind for data in contents.values()
                         for kind in re.findall(rb"\[REDACTED:([a-z-]+)\]", data))
    by_kind = manifest["redactionsByKind"]
    assert {k.encode(): v for k, v in by_kind.items()} == dict(in_archive)
    assert set(by_kind) == {"env", "provider-key", "token", "url-credentials"}
    assert manifest["redactions"] == sum(by_kind.values())
    printed = ", ".join(f"{by_kind[k]} {k}" for k in ("env", "provider-key", "token",
                                                     "url-credentials"))
    assert f"Redacted {manifest['redactions']} secrets: {printed}" in output


def test_redacted_export_still_parses_and_replays(recorded):
    archive, _ = export(recorded, "replayable")
    # The machine description (execution-meta.json's "environment") is not an env map.
    assert b"[REDACTED" not in members(archive)["execution-meta.json"]
    for name, data in members(archive).items():
        if name.endswith(".json"):
            json.loads(data)
        elif name.endswith(".log"):
            for line in data.decode().splitlines():
                json.loads(line)
    target = recorded.root / "replayed"
    result = recorded.hw("replay", str(archive), "-e", str(target), "--headless")
    assert result.returncode == 0, result.stderr
    assert "[REDACTED:token]" in (target / "agentRoot" / "notes.md").read_text()


def test_no_redact_keeps_the_secrets_and_says_so(recorded):
    archive, output = export(recorded, "verbatim", "--no-redact")
    data = b"".join(members(archive).values())
    assert all(secret.encode() in data for secret in SECRETS.values())
    assert b"[REDACTED" not in data
    assert "--no-redact" in output and "secrets" in output.lower()


def test_replaying_an_execution_directory_keeps_no_secret_in_its_copy(recorded):
    target = recorded.root / "replayed-dir"
    result = recorded.hw("replay", str(recorded.exec_dir), "-e", str(target), "--headless")
    assert result.returncode == 0, result.stderr
    copy = target / ".hankweave" / "recording"
    kept = b"".join(p.read_bytes() for p in copy.rglob("*") if p.is_file())
    assert kept and not [what for what, secret in SECRETS.items() if secret.encode() in kept]
