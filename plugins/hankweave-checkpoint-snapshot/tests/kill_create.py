"""Run one ``create()`` against an execution directory and SIGKILL the process part-way.

Usage: ``python kill_create.py <execution_dir> <point>``, where point is one of:

``object-write``
    killed while writing the first object's temp file (half of its bytes are written);
``before-manifest``
    killed once every object (file contents and the tree) is durable, before the manifest;
``manifest-write``
    killed while writing the manifest's temp file (half of it is written);
``after-manifest``
    killed right after the manifest is durable, before the stat cache is saved.

The store must already be initialized.  The process really dies by SIGKILL, so no ``finally`` or ``except`` clause of the store runs:
what is left on disk is exactly what a killed runtime would leave.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import hankweave_checkpoint_snapshot as snapshot
from hankweave_checkpoint_snapshot import manifests


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main(execution_dir: Path, point: str) -> None:
    # No initialize(): a runtime initializes once at boot, long before the create that dies,
    # so the residue of several kills can pile up as it would in real life.
    store = snapshot.SnapshotCheckpointStore(execution_dir)
    real_write = os.write
    real_atomic_write = manifests.atomic_write_bytes

    if point == "object-write":
        def write(fd: int, data: bytes) -> int:
            real_write(fd, bytes(data[: max(1, len(data) // 2)]))
            die()
            return 0
        os.write = write  # type: ignore[assignment]
    elif point == "before-manifest":
        manifests.atomic_write_bytes = lambda *args, **kwargs: die()
    elif point == "manifest-write":
        def torn(path: Path | str, data: bytes, **kwargs: Any) -> None:
            tmp = Path(path).with_name(f"{Path(path).name}.tmp-{os.getpid()}")
            tmp.write_bytes(data[: len(data) // 2])
            die()
        manifests.atomic_write_bytes = torn
    elif point == "after-manifest":
        def then_die(path: Path | str, data: bytes, **kwargs: Any) -> None:
            real_atomic_write(path, data, **kwargs)
            die()
        manifests.atomic_write_bytes = then_die
    else:
        raise SystemExit(f"unknown kill point {point!r}")

    store.create(kind="completed", run_id="r1", codon_id="killed", codon_name="Killed",
                 patterns=("**",))
    raise SystemExit("create() finished: the kill point was never reached")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
