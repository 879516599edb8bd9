"""What the code cites is in this repository's docs/: every document, every section."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [*ROOT.joinpath("hankweave").rglob("*.py"), *ROOT.joinpath("hankweave-replay").rglob(
    "*.py"), *ROOT.joinpath("plugins").rglob("*.py")]
DOC = re.compile(r"docs/([\w./-]+\.md)")
SECTION = re.compile(r"docs/behaviour\.md (§\d+(?:\.\d+)*)((?:-§\d+(?:\.\d+)*)?)")


def cited() -> list[tuple[str, str]]:
    found = []
    for path in SOURCES:
        text = path.read_text(encoding="utf-8")
        found += [(f"{path.relative_to(ROOT)}", match) for match in DOC.findall(text)]
    return found


def test_every_cited_document_exists() -> None:
    missing = [f"{where}: docs/{name}" for where, name in cited()
               if not (ROOT / "docs" / name).is_file()]
    assert missing == []


def test_every_cited_behaviour_section_exists() -> None:
    headings = set(re.findall(r"^#+ (§\d+(?:\.\d+)*)", (ROOT / "docs" / "behaviour.md").read_text(
        encoding="utf-8"), re.MULTILINE))
    missing = []
    for path in SOURCES:
        for start, rest in SECTION.findall(path.read_text(encoding="utf-8")):
            for section in [start, *re.findall(r"§[\d.]+", rest)]:
                if section.rstrip(".") not in headings:
                    missing.append(f"{path.relative_to(ROOT)}: {section}")
    assert missing == []


def test_no_code_cites_a_section_without_its_document() -> None:
    bare = []
    for path in SOURCES:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in re.finditer(r"§", line):
                before = line[:match.start()]
                if not before.endswith(("docs/behaviour.md ", "-")):
                    bare.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert bare == []
