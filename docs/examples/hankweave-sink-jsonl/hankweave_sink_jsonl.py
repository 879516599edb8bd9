"""An event sink that appends one JSON line per event to a file.

The file is the ``path`` argument, or else the ``HANKWEAVE_SINK_JSONL_PATH`` environment
variable.  The sink's name is ``jsonl-file``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import hankweave
from hankweave.events import EventSink

PATH_VARIABLE = "HANKWEAVE_SINK_JSONL_PATH"


@hankweave.hookimpl
def register_event_sinks(register: Callable[[type[EventSink]], None]) -> None:
    register(JsonlFileSink)


class JsonlFileSink(EventSink):
    name = "jsonl-file"

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        path = path or os.environ.get(PATH_VARIABLE)
        if not path:
            raise ValueError(f"jsonl-file sink: pass a path or set {PATH_VARIABLE}")
        self.path = Path(path)
        self._file: IO[str] | None = None

    def handle(self, event: Mapping[str, Any]) -> None:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a", encoding="utf-8")
        self._file.write(json.dumps(dict(event), ensure_ascii=False) + "\n")
        # Flushed per event so a crash loses nothing already handled.
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
