"""Harness warnings, each shown once per execution.

A harness warns about what applies to every codon alike (the Claude CLI's permission mode as
root, say): said at every codon of every run and resume, it is noise a person learns to skip,
and a real warning drowns in it.  :class:`GivenWarnings` remembers, in the execution, the
digest of every warning shown, so each is shown (and journaled) once per execution.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from hankweave.fsutil import PRIVATE_FILE_MODE, atomic_write_bytes

log = logging.getLogger(__name__)


class GivenWarnings:
    """The warnings an execution has shown (``.hankweave/warnings-given.json``, a JSON list of
    SHA-256 digests of their texts)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._given = self._read()

    def _read(self) -> set[str]:
        try:
            digests = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return set()
        except (OSError, ValueError) as exc:
            # A lost list costs a repeated warning, never a run.
            log.warning("%s unreadable (%s): warnings may be shown again", self.path, exc)
            return set()
        return {d for d in digests if isinstance(d, str)} if isinstance(digests, list) else set()

    def first_time(self, message: str) -> bool:
        """Whether ``message`` is new to this execution; it is remembered from now on."""
        digest = hashlib.sha256(message.encode("utf-8")).hexdigest()
        if digest in self._given:
            return False
        self._given.add(digest)
        try:
            atomic_write_bytes(self.path, json.dumps(sorted(self._given)).encode("utf-8"),
                               mode=PRIVATE_FILE_MODE)  # everything under .hankweave/ is 0600
        except OSError as exc:
            log.warning("cannot record a warning as shown in %s: %s", self.path, exc)
        return True
