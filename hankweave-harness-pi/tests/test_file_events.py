"""A sentinel on ``file.updated`` fires when the pi agent (real litellm against the mock
provider) writes a file, and reads the file's content (issue 36, item 1)."""

from __future__ import annotations

import json
from pathlib import Path

from pi_helpers import PiProject

PLAN = "# Plan\n\n1. survey\n2. write\n"
SCRIPT = {"rules": [
    {"name": "write", "when": {"lastUserMessage": "Write the plan", "afterToolResult": False},
     "reply": {"toolCalls": [{"name": "write", "input": {"path": "plan.md", "content": PLAN}}]}},
    {"name": "done", "when": {"lastUserMessage": "Write the plan", "afterToolResult": True},
     "reply": {"text": "Written."}},
    {"name": "watcher", "when": {"lastUserMessage": {"contains": "[watch]"}},
     "reply": {"text": "The plan has two steps."}},
]}
WATCH = {"id": "watch", "name": "Plan watcher", "model": "openai/gpt-5-mini",
         "trigger": {"type": "event", "on": ["file.updated"],
                     "conditions": [{"path": "path", "operator": "equals", "value": "plan.md"}]},
         "execution": {"strategy": "immediate"},
         "userPromptText": "[watch] {{ events[0].data.path }} ({{ events[0].data.action }}):\n"
                           "{{ events[0].data.content }}"}


def test_a_sentinel_on_file_updated_fires_with_the_written_file(tmp_path: Path) -> None:
    project = PiProject(tmp_path, SCRIPT)
    project.write_hank([{"id": "plan", "name": "Plan", "model": "gpt-5.2",
                         "continuationMode": "fresh", "promptText": "Write the plan.",
                         "sentinels": [{"sentinelConfig": WATCH}]}])

    done = project.run()

    assert done.code == 0, done.stderr
    assert (project.agent_root / "plan.md").read_text() == PLAN
    events = [json.loads(line) for line in
              (project.hankweave_dir / "events" / "events.jsonl").read_text().splitlines()]
    (update,) = [e["data"] for e in events if e["type"] == "file.updated"]
    assert (update["path"], update["action"], update["bytes"]) == ("plan.md", "created",
                                                                    len(PLAN))
    assert update["source"]["kind"] == "tool_use"
    asked = [r for r in project.model_requests() if (r.rule or "").endswith("(watcher)")]
    assert len(asked) == 1
    assert f"[watch] plan.md (created):\n{PLAN}" in json.dumps(asked[0].body,
                                                               ensure_ascii=False).replace(
        "\\n", "\n")
