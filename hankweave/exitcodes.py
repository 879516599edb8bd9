"""The process exit codes of ``hankweave`` (``docs/cli.md`` lists when each is used)."""

from __future__ import annotations

EXIT_OK = 0
"""Success: the plan finished, or the command did what it was asked."""
EXIT_FAILED = 1
"""The run failed (a codon failed under ``abort``, a budget ended it, a forced shutdown)."""
EXIT_USAGE = 2
"""Bad input or a refused start: a malformed hank, a held lock, a missing plugin."""
EXIT_INTERRUPTED = 3
"""The run ended waiting for a human: answer its interruptions (``hankweave answer``), then
``hankweave run -e DIR`` resumes it."""
EXIT_SIGINT = 130
"""Stopped by Ctrl-C (128 + SIGINT) after a clean, resumable shutdown."""
EXIT_SIGTERM = 143
"""Stopped by SIGTERM (128 + 15) after a clean, resumable shutdown."""

SIGNAL_EXIT_CODES: dict[str, int] = {"SIGINT": EXIT_SIGINT, "SIGTERM": EXIT_SIGTERM}
"""A run stopped by a signal exits 128 + the signal number, as shells expect."""
