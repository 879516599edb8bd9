"""An event sink that appends one JSON line per event to a file.

Enable it in ``hankweave.json``::

    {"events": {"sinks": [{"name": "jsonl-file", "config": {"path": "/tmp/events.jsonl"}}]}}

Without ``config.path`` it writes to the file the ``HANKWEAVE_SINK_JSONL_PATH`` environment
variable names.  The sink's name is ``jsonl-file``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from hankweave.api import EventSink, SinkConfig, hookimpl

PATH_VARIABLE = "HANKWEAVE_SINK_JSONL_PATH"


@hookimpl
def register_event_sinks(register: Callable[[type[EventSink]], None]) -> None:
    register(JsonlFileSink)


class JsonlFileSink(EventSink):
    name = "jsonl-file"

    class Config(SinkConfig):
        path: str | None = None
        """The file to append to (default: $HANKWEAVE_SINK_JSONL_PATH)."""

    config: Config

    def __init__(self, config: Config | None = None, *,
                 path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(config)
        path = path or self.config.path or os.environ.get(PATH_VARIABLE)
        if not path:
            raise ValueError(f"jsonl-file sink: set config.path, pass a path or set"
                             f" {PATH_VARIABLE}")
        self.path = Path(path).expanduser()
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
