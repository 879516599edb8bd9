"""``hankweave pack`` and running a ``.hank`` bundle (hankweave.bundle, docs/bundles.md).

The journeys go through the real CLI: pack, pack again, run the bundle, tamper with it and run
again. The format assertions are Hankweave 0.12's (its pack tests, in our own words): the lock's
shape and identity, canonical JSON, the tar profile, what the closure holds and leaves out.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard

from hankweave.bundle.canonical import CanonicalJsonError, canonical_json
from hankweave.bundle.closure import DEFAULT_QUOTAS, IGNORE_DEFAULTS_FINGERPRINT, compute_closure
from hankweave.bundle.lock import LockError, bundle_hash, parse_lock, serialize_lock, sha256_hex
from hankweave.bundle.pack import build_lock, bundle_bytes, pack_hank
from hankweave.bundle.reader import BundleError, open_bundle
from hankweave.bundle.tar import BundleFormatError, Member, pax_path_record, read_tar, write_tar
from tests.runtime_harness import Project, codon

# ----- a hank with every kind of ref -----


def make_hank(root: Path) -> Path:
    """A hank that refers to prompts, a copied directory (with junk to leave out and an
    executable script), a sentinel config file with its own prompt, and a global prompt."""
    hank = root / "pack-fixture"
    files = {
        "prompts/codon1.md": "Do the first thing.\n",
        "prompts/codon2.md": "Do the second thing.\n",
        "prompts/global-system.md": "Be careful.\n",
        "prompts/check-user.md": "Check it.\n",
        "sentinels/check.json": json.dumps({
            "id": "check", "name": "Check", "trigger": {"type": "event",
                                                         "on": ["assistant.action"]},
            "execution": {"strategy": "immediate"}, "model": "fake",
            "userPromptFile": "../prompts/check-user.md"}),
        "tpl/README.md": "# template\n",
        "tpl/bin/run.sh": "#!/bin/sh\necho hi\n",
        "tpl/node_modules/pkg/index.js": "junk\n",
        "tpl/debug.log": "noise\n",
        "unreferenced.md": "not in the closure\n",
    }
    for relative, text in files.items():
        path = hank / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (hank / "tpl/bin/run.sh").chmod(0o755)
    (hank / "hank.json").write_text(json.dumps({
        "meta": {"name": "pack-fixture", "version": "1.0.0"},
        "globalSystemPromptFile": "prompts/global-system.md",
        "hank": [
            {**codon("codon-1", promptText=None, promptFile="prompts/codon1.md"),
             "rigSetup": [{"type": "copy", "copy": {"from": "tpl", "to": "tpl"}}],
             "sentinels": [{"sentinelConfig": "sentinels/check.json"}]},
            {"type": "loop", "id": "loop-1", "name": "Loop", "terminateOn":
             {"type": "iterationLimit", "limit": 1},
             "codons": [codon("codon-2", promptText=None, promptFile="prompts/codon2.md")]},
        ]}, indent=2))
    return hank


def hankweave(*args: str | Path, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "hankweave", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return Project(tmp_path)


# ----- the closure -----


def test_the_closure_is_what_the_hank_refers_to_minus_ignored_junk(tmp_path: Path):
    closure = compute_closure(make_hank(tmp_path) / "hank.json")

    assert closure.ok, closure.findings
    assert sorted(closure.files) == [
        "hank.json", "prompts/check-user.md", "prompts/codon1.md", "prompts/codon2.md",
        "prompts/global-system.md", "sentinels/check.json", "tpl/README.md", "tpl/bin/run.sh"]
    assert closure.files["tpl/bin/run.sh"].mode == "755"
    assert closure.files["tpl/README.md"].mode == "644"
    (warning,) = [f for f in closure.findings if f.category == "ignored-paths"]
    assert warning.detail.startswith("2 entries excluded by the default ignore rules")


def test_a_root_gitignore_replaces_the_defaults_and_ships(tmp_path: Path):
    hank = make_hank(tmp_path)
    (hank / ".gitignore").write_text("*.md\n")

    closure = compute_closure(hank / "hank.json")

    assert ".gitignore" in closure.files
    assert "tpl/node_modules/pkg/index.js" in closure.files  # no default rules now
    assert "tpl/README.md" not in closure.files


@pytest.mark.parametrize(("change", "category"), [
    (lambda h: (h / "tpl/link.md").symlink_to(h / "tpl/README.md"), "symlink"),
    (lambda h: (h / "tpl/.gitignore").write_text("x\n"), "invalid-ignore-rules"),
    (lambda h: (h / "hank.lock").mkdir(), "reserved-path"),
])
def test_a_hank_that_cannot_be_packed_is_refused_with_where_and_why(tmp_path: Path, change,
                                                                    category: str):
    hank = make_hank(tmp_path)
    change(hank)

    closure = compute_closure(hank / "hank.json")

    assert not closure.ok
    assert any(category in f"{f.category} {f.detail}" for f in closure.errors)


def test_a_missing_prompt_is_named_at_its_field(tmp_path: Path):
    hank = make_hank(tmp_path)
    (hank / "prompts/codon2.md").unlink()

    closure = compute_closure(hank / "hank.json")

    (error,) = closure.errors
    assert error.where == "hank[1].codons[0].promptFile"
    assert "prompts/codon2.md" in error.detail


# ----- the lock -----


def test_the_lock_has_hankweave_s_shape_and_identity(tmp_path: Path):
    lock = build_lock(compute_closure(make_hank(tmp_path) / "hank.json"))
    data = json.loads(serialize_lock(lock))

    assert sorted(data) == ["bundleHash", "codonInputs", "files", "ignoreDefaults", "name",
                            "runtime", "v", "version"]
    assert (data["v"], data["name"], data["version"]) == (1, "pack-fixture", "1.0.0")
    assert data["runtime"] == {"min": "0.12.0"}
    assert data["ignoreDefaults"] == IGNORE_DEFAULTS_FINGERPRINT
    assert sorted(data["codonInputs"]) == ["codon-1", "loop-1/codon-2"]
    assert "hank.lock" not in data["files"]
    # bundleHash covers exactly {v, files, runtime}
    identity = {"v": 1, "files": data["files"], "runtime": data["runtime"]}
    assert data["bundleHash"] == sha256_hex("hankweave-bundle-v1\0" + canonical_json(identity))
    # canonical: sorted keys, no spaces, one newline; a parse and re-serialization is a fixpoint
    text = serialize_lock(lock).decode()
    assert text == canonical_json(json.loads(text)) + "\n"


def test_a_mode_flip_or_runtime_change_is_a_different_bundle(tmp_path: Path):
    hank = make_hank(tmp_path)
    before = build_lock(compute_closure(hank / "hank.json"))
    (hank / "tpl/README.md").chmod(0o755)
    after = build_lock(compute_closure(hank / "hank.json"))

    assert after.files["tpl/README.md"].sha256 == before.files["tpl/README.md"].sha256
    assert after.bundle_hash != before.bundle_hash
    assert after.codon_inputs["codon-1"] != before.codon_inputs["codon-1"]
    assert after.codon_inputs["loop-1/codon-2"] == before.codon_inputs["loop-1/codon-2"]
    assert bundle_hash(before.files, "9.9.9") != before.bundle_hash


def test_editing_one_prompt_changes_only_the_codons_that_read_it(tmp_path: Path):
    hank = make_hank(tmp_path)
    before = build_lock(compute_closure(hank / "hank.json"))
    with open(hank / "prompts/codon2.md", "a") as handle:
        handle.write("Edited.\n")
    after = build_lock(compute_closure(hank / "hank.json"))

    assert after.codon_inputs["loop-1/codon-2"] != before.codon_inputs["loop-1/codon-2"]
    assert after.codon_inputs["codon-1"] == before.codon_inputs["codon-1"]
    with open(hank / "prompts/global-system.md", "a") as handle:
        handle.write("Edited.\n")
    edited = build_lock(compute_closure(hank / "hank.json"))
    assert all(edited.codon_inputs[k] != after.codon_inputs[k] for k in after.codon_inputs)


def test_junk_and_empty_folders_leave_the_lock_byte_identical(tmp_path: Path):
    hank = make_hank(tmp_path)
    before = serialize_lock(build_lock(compute_closure(hank / "hank.json")))
    (hank / "tpl/empty").mkdir()
    (hank / "tpl/.git").mkdir()
    (hank / "tpl/.git/config").write_text("[core]\n")
    (hank / "tpl/more.log").write_text("noise\n")

    assert serialize_lock(build_lock(compute_closure(hank / "hank.json"))) == before


def test_without_meta_the_name_comes_from_the_hash_not_the_folder(tmp_path: Path):
    hank = make_hank(tmp_path)
    raw = json.loads((hank / "hank.json").read_text())
    del raw["meta"]
    (hank / "hank.json").write_text(json.dumps(raw))
    lock = build_lock(compute_closure(hank / "hank.json"))

    assert (lock.name, lock.version) == (f"hank-{lock.bundle_hash[:12]}", "0.0.0")


# ----- canonical JSON and the tar profile -----


def test_canonical_json_sorts_keys_by_utf8_bytes_and_refuses_what_has_no_form():
    assert canonical_json({"b": 1, "a": {"d": 2, "c": 3}}) == '{"a":{"c":3,"d":2},"b":1}'
    text = canonical_json({"\U00010000": 1, "\ufffd": 2})  # UTF-16 would sort U+10000 first
    assert text.index("\ufffd") < text.index("\U00010000")
    assert canonical_json({"x": 2.0, "y": 5e-05}) == '{"x":2,"y":0.00005}'
    for bad in ({"a": float("inf")}, {"\ud800": 1}):
        with pytest.raises(CanonicalJsonError):
            canonical_json(bad)


@pytest.mark.parametrize("length", [98, 99, 100, 101, 250])
def test_a_pax_path_record_counts_its_own_length(length: int):
    record = pax_path_record("p" * length)
    size, _, rest = record.decode().partition(" ")
    assert int(size) == len(record) and rest == f"path={'p' * length}\n"


def test_the_tar_round_trips_and_refuses_anything_off_profile():
    long_path = "deep/" * 30 + "file.md"
    members = [Member("hank.lock", b"{}", "644"), Member("a.sh", b"x", "755"),
               Member(long_path, b"y" * 600, "644")]
    data = write_tar(members)
    assert read_tar(data, DEFAULT_QUOTAS) == members
    assert len(data) % 512 == 0 and data[-1024:] == b"\0" * 1024

    with pytest.raises(BundleFormatError, match="after the end marker"):
        read_tar(data + b"\0" * 512, DEFAULT_QUOTAS)
    with pytest.raises(BundleFormatError, match="appears twice"):
        read_tar(write_tar([members[1], members[1]]), DEFAULT_QUOTAS)
    symlink = bytearray(write_tar([members[1]]))
    symlink[156:157] = b"2"
    with pytest.raises(BundleFormatError, match="symlink"):
        read_tar(bytes(symlink), DEFAULT_QUOTAS)
    owned = bytearray(data)
    owned[108:116] = b"0001750\0"  # a uid: not canonical
    with pytest.raises(BundleFormatError, match="canonical"):
        read_tar(bytes(owned), DEFAULT_QUOTAS)


# ----- pack, then run: the journey -----


def test_pack_twice_gives_the_same_bytes_and_the_sidecar_is_the_embedded_lock(tmp_path: Path):
    hank = make_hank(tmp_path)
    env = {**os.environ, "HANKWEAVE_HOME": str(tmp_path / "home")}
    first = hankweave("pack", hank, "-o", "a.hank", cwd=tmp_path, env=env)
    os.utime(hank / "prompts/codon1.md", (1, 1))  # times do not matter
    second = hankweave("pack", hank, "-o", "b.hank", "--no-lock", cwd=tmp_path, env=env)

    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert (tmp_path / "a.hank").read_bytes() == (tmp_path / "b.hank").read_bytes()
    assert "Run it: hankweave run a.hank DATA" in first.stdout
    tar = zstandard.ZstdDecompressor().stream_reader(
        io.BytesIO((tmp_path / "a.hank").read_bytes())).read()
    embedded = read_tar(tar, DEFAULT_QUOTAS)[0]
    assert embedded.path == "hank.lock"
    assert embedded.data == (hank / "hank.lock").read_bytes()
    assert json.loads(bytes(embedded.data))["bundleHash"] in first.stdout


def test_pack_names_the_bundle_after_meta(tmp_path: Path):
    hank = make_hank(tmp_path)
    result = hankweave("pack", hank, cwd=tmp_path, env=dict(os.environ))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "pack-fixture-1.0.0.hank").is_file()


def test_pack_refuses_a_broken_hank_and_writes_nothing(tmp_path: Path):
    hank = make_hank(tmp_path)
    (hank / "prompts/codon1.md").unlink()
    result = hankweave("pack", hank, "-o", "x.hank", cwd=tmp_path, env=dict(os.environ))

    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "hank[0].promptFile" in result.stderr and "prompts/codon1.md" in result.stderr
    assert not (tmp_path / "x.hank").exists() and not (hank / "hank.lock").exists()


def _bundle_project(project: Project) -> Path:
    project.write_file("prompts/a.md", "Do a.\n")
    project.write_hank([codon("a", promptText=None, promptFile="prompts/a.md"), codon("b")],
                       meta={"name": "bundled", "version": "2.0.0"})
    result = pack_hank(project.hank_dir, output=Path("bundled.hank"), cwd=project.root)
    assert result.output is not None
    return result.output


def test_a_bundle_runs_and_its_execution_records_the_bundle_hash(project: Project):
    bundle = _bundle_project(project)

    result = hankweave("run", bundle, project.data, "-e", project.exec_dir, "--headless",
                       cwd=project.root, env=project.env)

    assert result.returncode == 0, result.stderr
    assert "verified against its hank.lock" in result.stdout + result.stderr
    meta = json.loads((project.hankweave_dir / "execution-meta.json").read_text())
    lock = json.loads((project.hank_dir / "hank.lock").read_text())
    assert meta["bundleHash"] == lock["bundleHash"]
    assert meta["bundlePath"] == str(bundle)
    extracted = Path(meta["hankPath"]).parent
    assert extracted == project.root / "home/.cache/bundles" / lock["bundleHash"]
    assert (extracted / "prompts/a.md").read_text() == "Do a.\n"
    # A resume with only -e keeps the bundle's identity.
    again = hankweave("run", "-e", project.exec_dir, "--headless", cwd=project.root,
                      env=project.env)
    assert again.returncode == 0, again.stderr
    meta = json.loads((project.hankweave_dir / "execution-meta.json").read_text())
    assert meta["bundleHash"] == lock["bundleHash"]


def _rewritten(bundle: Path, change) -> None:  # type: ignore[no-untyped-def]
    tar = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(bundle.read_bytes())).read()
    members = change([Member(m.path, bytes(m.data), m.mode) for m in read_tar(tar, DEFAULT_QUOTAS)])
    bundle.write_bytes(zstandard.ZstdCompressor().compress(write_tar(members)))


@pytest.mark.parametrize(("change", "named"), [
    (lambda ms: [m if m.path != "prompts/a.md" else Member(m.path, b"rm -rf ~\n", m.mode)
                 for m in ms], "differs: prompts/a.md"),
    (lambda ms: [m if m.path != "prompts/a.md" else Member(m.path, m.data, "755")
                 for m in ms], "differs: prompts/a.md"),
    (lambda ms: [m for m in ms if m.path != "prompts/a.md"], "missing prompts/a.md"),
    (lambda ms: [*ms, Member("prompts/extra.md", b"x", "644")], "extra prompts/extra.md"),
])
def test_a_tampered_bundle_is_refused_by_name_before_anything_runs(project: Project, change,
                                                                   named: str):
    bundle = _bundle_project(project)
    _rewritten(bundle, change)

    result = hankweave("run", bundle, project.data, "-e", project.exec_dir, "--headless",
                       cwd=project.root, env=project.env)

    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert named in result.stderr and str(bundle) in result.stderr
    assert not project.exec_dir.exists()
    assert not (project.root / "home/.cache/bundles").exists()
    validated = hankweave("validate", bundle, project.data, cwd=project.root, env=project.env)
    assert validated.returncode == 2 and named in validated.stderr


def test_a_lock_edited_to_match_its_files_still_fails_its_own_hash(project: Project):
    bundle = _bundle_project(project)

    def edit(members: list[Member]) -> list[Member]:
        lock = json.loads(members[0].data)
        lock["files"]["prompts/a.md"]["sha256"] = sha256_hex(b"evil\n")
        members = [Member(m.path, b"evil\n", m.mode) if m.path == "prompts/a.md" else m
                   for m in members]
        return [Member("hank.lock", json.dumps(lock).encode(), "644"), *members[1:]]

    _rewritten(bundle, edit)
    with pytest.raises(BundleError, match=r"bundleHash .* is not the hash of the files"):
        open_bundle(bundle, project.root / "cache")


def test_bundles_that_are_not_bundles_say_so(project: Project):
    bundle = _bundle_project(project)
    cache = project.root / "cache"
    garbage = project.root / "garbage.hank"
    garbage.write_bytes(b"not zstd")
    with pytest.raises(BundleError, match="not a zstd archive"):
        open_bundle(garbage, cache)
    _rewritten(bundle, lambda ms: ms[1:] + ms[:1])
    with pytest.raises(BundleError, match="first member"):
        open_bundle(bundle, cache)
    with pytest.raises(BundleError, match="does not exist"):
        open_bundle(project.root / "missing.hank", cache)


def test_a_bundle_needing_a_newer_runtime_is_refused(project: Project):
    _bundle_project(project)
    result = pack_hank(project.hank_dir, output=Path("new.hank"), runtime_min="99.0.0",
                       cwd=project.root)
    assert result.output is not None
    with pytest.raises(BundleError, match=r"needs a Hankweave 99\.0\.0 runtime"):
        open_bundle(result.output, project.root / "cache")


def test_an_extraction_is_reused_and_repaired_when_it_changed(project: Project):
    bundle = _bundle_project(project)
    cache = project.root / "cache"

    first = open_bundle(bundle, cache)
    assert first.extraction == "fresh"
    assert oct(first.hank_dir.stat().st_mode & 0o777) == "0o700"
    assert open_bundle(bundle, cache).extraction == "reused"
    (first.hank_dir / "prompts/a.md").write_text("changed\n")
    repaired = open_bundle(bundle, cache)
    assert repaired.extraction == "repaired"
    assert (repaired.hank_dir / "prompts/a.md").read_text() == "Do a.\n"


def test_unsafe_lock_paths_are_refused_before_extraction(project: Project):
    bundle = _bundle_project(project)
    cache = project.root / "cache"
    for bad in ("../escape", "a/../b", ".git/config", "CON.txt", "x."):
        def add(members: list[Member], bad: str = bad) -> list[Member]:
            lock = json.loads(members[0].data)
            lock["files"][bad] = {"mode": "644", "sha256": sha256_hex(b"x")}
            lock["bundleHash"] = bundle_hash(
                {k: _entry(v) for k, v in lock["files"].items()}, lock["runtime"]["min"])
            rest = sorted([*members[1:], Member(bad, b"x", "644")],
                          key=lambda m: m.path.encode())
            return [Member("hank.lock", json.dumps(lock).encode(), "644"), *rest]

        _rewritten(bundle, add)
        with pytest.raises(BundleError, match=r"hank\.lock lists"):
            open_bundle(bundle, cache)
        assert not cache.exists()
        bundle = _bundle_project(project)


def _entry(value: dict[str, str]):  # type: ignore[no-untyped-def]
    from hankweave.bundle.lock import LockedFile

    return LockedFile.model_validate(value)


def test_a_lock_with_an_unknown_key_is_refused():
    lock = {"v": 1, "name": "n", "version": "1", "files": {}, "codonInputs": {},
            "runtime": {"min": "0.12.0"}, "ignoreDefaults": "0" * 64, "extra": True}
    lock["bundleHash"] = bundle_hash({}, "0.12.0")
    with pytest.raises(LockError, match="extra"):
        parse_lock(json.dumps(lock).encode(), "hank.lock")


def test_the_bundle_bytes_do_not_depend_on_the_machine(tmp_path: Path):
    hank = make_hank(tmp_path)
    closure = compute_closure(hank / "hank.json")
    data = bundle_bytes(closure, build_lock(closure))
    os.chmod(hank / "prompts/codon1.md", 0o600)  # not an exec-bit change: same member mode
    again = compute_closure(hank / "hank.json")
    assert bundle_bytes(again, build_lock(again)) == data


# ----- an attacker's bundle or hank -----


@pytest.mark.parametrize("name", ["CON.txt", "a:b.md", "trailing.", "new\nline.md"])
def test_pack_refuses_a_name_another_system_cannot_extract(tmp_path: Path, name: str):
    hank = make_hank(tmp_path)
    (hank / "tpl" / name).write_text("x\n")

    closure = compute_closure(hank / "hank.json")

    assert [f.category for f in closure.errors] == ["non-portable-path"]
    assert "\n" not in closure.errors[0].detail  # escaped: names reach a terminal


def test_pack_escapes_control_characters_in_what_it_prints(tmp_path: Path):
    hank = make_hank(tmp_path)
    (hank / "tpl" / "\x1b]0;pwned\x07.md").write_text("x\n")
    result = hankweave("pack", hank, "--check", cwd=tmp_path, env=dict(os.environ))
    assert result.returncode == 2 and "\x1b" not in result.stderr + result.stdout
    assert "\\x1b]0;pwned\\x07.md" in result.stderr


def test_a_bundle_with_junk_after_it_or_out_of_order_is_refused(project: Project):
    bundle = _bundle_project(project)
    cache = project.root / "cache"
    data = bundle.read_bytes()
    bundle.write_bytes(data + b"junk")
    with pytest.raises(BundleError, match="4 bytes after its zstd frame"):
        open_bundle(bundle, cache)
    bundle.write_bytes(data[:-3])
    with pytest.raises(BundleError, match="zstd"):
        open_bundle(bundle, cache)
    bundle.write_bytes(data)
    _rewritten(bundle, lambda ms: [ms[0], *reversed(ms[1:])])
    with pytest.raises(BundleError, match="not in the order pack writes them"):
        open_bundle(bundle, cache)


def test_a_lock_listing_too_many_files_is_refused_before_it_is_read(project: Project):
    bundle = _bundle_project(project)

    def many(members: list[Member]) -> list[Member]:
        lock = json.loads(members[0].data)
        lock["files"] = {f"f{i}": {"mode": "644", "sha256": "0" * 64} for i in range(50_001)}
        return [Member("hank.lock", json.dumps(lock).encode(), "644"), *members[1:]]

    _rewritten(bundle, many)
    with pytest.raises(BundleError, match="lists 50001 files; a bundle holds at most 50000"):
        open_bundle(bundle, project.root / "cache")


def test_a_planted_extraction_is_replaced_not_followed(project: Project, tmp_path: Path):
    bundle = _bundle_project(project)
    cache = project.root / "cache"
    lock = json.loads((project.hank_dir / "hank.lock").read_text())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (cache / "bundles").mkdir(parents=True)
    (cache / "bundles" / lock["bundleHash"]).symlink_to(elsewhere)

    opened = open_bundle(bundle, cache)

    assert opened.extraction == "repaired" and not opened.hank_dir.is_symlink()
    assert list(elsewhere.iterdir()) == []


# ----- codonInputs: which codons a change touches (the original's lock tests) -----


def _inputs(hank: Path) -> dict[str, str]:
    return build_lock(compute_closure(hank / "hank.json")).codon_inputs


def _edit(hank: Path, change) -> None:  # type: ignore[no-untyped-def]
    raw = json.loads((hank / "hank.json").read_text())
    change(raw)
    (hank / "hank.json").write_text(json.dumps(raw, indent=2))


def test_a_loop_setting_touches_only_its_children_and_a_reorder_touches_both(tmp_path: Path):
    hank = make_hank(tmp_path)
    before = _inputs(hank)
    _edit(hank, lambda raw: raw["hank"][1]["terminateOn"].update(limit=2))
    looped = _inputs(hank)
    assert looped["codon-1"] == before["codon-1"]
    assert looped["loop-1/codon-2"] != before["loop-1/codon-2"]
    _edit(hank, lambda raw: raw["hank"].reverse())
    reordered = _inputs(hank)
    assert all(reordered[key] != looped[key] for key in looped)


def test_requirements_env_is_hashed_trimmed_and_overrides_touch_every_codon(tmp_path: Path):
    hank = make_hank(tmp_path)
    _edit(hank, lambda raw: raw.update(requirements={"env": ["TOKEN"]}))
    before = _inputs(hank)
    _edit(hank, lambda raw: raw.update(requirements={"env": ["  TOKEN  "]}))
    assert _inputs(hank) == before
    _edit(hank, lambda raw: raw.update(overrides={"model": "sonnet"}))
    assert all(_inputs(hank)[key] != before[key] for key in before)


def test_two_spellings_of_one_file_are_one_input(tmp_path: Path):
    hank = make_hank(tmp_path)
    before = build_lock(compute_closure(hank / "hank.json"))
    _edit(hank, lambda raw: raw["hank"][0]["rigSetup"][0]["copy"].update({"from": "./tpl"}))
    after = build_lock(compute_closure(hank / "hank.json"))
    assert after.codon_inputs == before.codon_inputs
    assert after.bundle_hash != before.bundle_hash  # hank.json's own bytes differ


def test_a_sentinel_s_prompt_touches_only_its_codon(tmp_path: Path):
    hank = make_hank(tmp_path)
    before = _inputs(hank)
    with open(hank / "prompts/check-user.md", "a") as handle:
        handle.write("Edited.\n")
    after = _inputs(hank)
    assert after["codon-1"] != before["codon-1"]
    assert after["loop-1/codon-2"] == before["loop-1/codon-2"]


def test_validate_names_the_bundle_it_verified(project: Project):
    bundle = _bundle_project(project)
    lock = json.loads((project.hank_dir / "hank.lock").read_text())

    result = hankweave("validate", bundle, project.data, "--json", cwd=project.root,
                       env=project.env)
    summary = hankweave("validate", bundle, project.data, cwd=project.root, env=project.env)

    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["hankSource"] == {"bundleHash": lock["bundleHash"], "bundlePath": str(bundle)}
    assert report["valid"] and report["hankPath"].endswith(f"{lock['bundleHash']}/hank.json")
    shown = " ".join(summary.stdout.split())  # the console folds long lines
    assert f"from bundle {bundle}, verified (bundleHash {lock['bundleHash']})" in shown


def test_a_resume_gets_the_bundle_back_when_the_cache_was_deleted(project: Project):
    import shutil

    bundle = _bundle_project(project)
    first = hankweave("run", bundle, project.data, "-e", project.exec_dir, "--headless",
                      cwd=project.root, env=project.env)
    assert first.returncode == 0, first.stderr
    shutil.rmtree(project.root / "home/.cache")

    again = hankweave("run", "-e", project.exec_dir, "--headless", cwd=project.root,
                      env=project.env)

    assert again.returncode == 0, again.stderr
    assert "verified against its hank.lock" in again.stdout + again.stderr
    meta = json.loads((project.hankweave_dir / "execution-meta.json").read_text())
    assert Path(meta["hankPath"]).is_file()

    shutil.rmtree(project.root / "home/.cache")
    (project.hank_dir / "prompts/a.md").write_text("Changed.\n")
    pack_hank(project.hank_dir, output=Path("bundled.hank"), cwd=project.root)
    changed = hankweave("run", "-e", project.exec_dir, "--headless", cwd=project.root,
                        env=project.env)
    assert changed.returncode == 2 and "Traceback" not in changed.stderr
    assert f"this execution ran bundle {meta['bundleHash'][:12]}" in changed.stderr
