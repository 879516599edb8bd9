"""A tiny linter for the tests: reports each Python file that does not compile.

Paths come as arguments, or one per line on stdin with ``--stdin``.  It prints
``<path>:<line>: <message>`` per finding and exits 1 when it found one, as ruff and flake8 do.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    paths = sys.stdin.read().splitlines() if argv[:1] == ["--stdin"] else argv
    found = 0
    for path in filter(None, paths):
        try:
            with open(path, encoding="utf-8") as file:
                compile(file.read(), path, "exec")
        except SyntaxError as exc:
            print(f"{path}:{exc.lineno}: {exc.msg}")
            found += 1
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
