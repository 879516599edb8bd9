"""Text snapshots of screens: a test renders a screen, and :func:`assert_snapshot` compares it
with ``tests/snapshots/<name>.txt``.

Values that change from run to run (timestamps, run ids, checkpoint shas, session ids, paths)
are replaced by placeholders *of the same width*, so the layout itself is compared.  Set
``HANKWEAVE_UPDATE_SNAPSHOTS=1`` to write the files after a deliberate change of layout (and
read the diff before committing them).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

SNAPSHOTS = Path(__file__).parent / "snapshots"

_VOLATILE = [
    (re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?Z?"), "T"),
    (re.compile(r"\b\d{13}-[a-z0-9]{4,6}(-[0-9a-f]{6})?\b"), "R"),  # run and execution ids
    (re.compile(r"\b[0-9a-f]{8}\b"), "h"),  # short checkpoint shas
    (re.compile(r"fake-[a-z#0-9]+-\d+"), "S"),  # the fake harness's session ids
    (re.compile(r"\b\d+\.\ds\b"), "s"),  # elapsed seconds
]


def normalized(text: str, *replace: str) -> str:
    """``text`` with volatile values masked (same width) and trailing spaces removed."""
    for literal in replace:
        text = text.replace(literal, "<path>")
    for pattern, mark in _VOLATILE:
        text = pattern.sub(lambda found, mark=mark: mark * len(found.group(0)), text)
    return "\n".join(line.rstrip() for line in text.splitlines()).strip("\n") + "\n"


def assert_snapshot(name: str, text: str) -> None:
    path = SNAPSHOTS / f"{name}.txt"
    if os.environ.get("HANKWEAVE_UPDATE_SNAPSHOTS") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"no snapshot {path}: run with HANKWEAVE_UPDATE_SNAPSHOTS=1"
    assert text == path.read_text(), f"{name} differs from {path}:\n{text}"


def assert_fits(text: str, width: int) -> None:
    """Nothing is cut and no line is wider than the screen."""
    from rich.cells import cell_len

    assert "…" not in text, text
    too_wide = [line for line in text.splitlines() if cell_len(line) > width]
    assert not too_wide, f"lines wider than {width}: {too_wide}"
