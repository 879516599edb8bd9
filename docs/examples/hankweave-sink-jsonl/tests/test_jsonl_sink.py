"""The example sink proven by the kernel's sink contract."""

import json

from hankweave.testing import EventSinkContract

from hankweave_sink_jsonl import JsonlFileSink


class TestJsonlFileSink(EventSinkContract):
    sink_class = JsonlFileSink

    def config(self, tmp_path):
        return {"path": str(tmp_path / "events.jsonl")}

    def received(self, sink, tmp_path):
        return [json.loads(line) for line in (tmp_path / "events.jsonl").open()]
