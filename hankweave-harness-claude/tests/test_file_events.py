"""A sentinel on ``file.updated`` fires when the Claude Code CLI (real, against the mock
provider) writes a file with its ``Write`` tool, and reads the file's content (issue 36,
item 1).  The sentinel's own call goes through litellm to the same mock."""

from __future__ import annotations

import json

import pytest
from claude_helpers import HankProject, codon

pytest.importorskip("litellm", reason="LLM sentinels need litellm (the sentinels extra)")

PLAN = "# Plan\n\n1. survey\n2. write\n"
WATCH = {"id": "watch", "name": "Plan watcher", "model": "anthropic/claude-haiku-4-5",
         "trigger": {"type": "event", "on": ["file.updated"],
                     "conditions": [{"path": "path", "operator": "equals", "value": "plan.md"}]},
         "execution": {"strategy": "immediate"},
         "userPromptText": "[watch] {{ events[0].data.path }} ({{ events[0].data.action }}):\n"
                           "{{ events[0].data.content }}"}


def test_a_sentinel_on_file_updated_fires_with_the_written_file(project: HankProject) -> None:
    target = project.execution / "agentRoot" / "plan.md"
    project.write([codon("plan", promptText="Write the plan.",
                         sentinels=[{"sentinelConfig": WATCH}])], {"rules": [
        {"name": "write", "when": {"lastUserMessage": "Write the plan",
                                   "afterToolResult": False},
         "reply": {"toolCalls": [{"name": "Write", "input": {"file_path": str(target),
                                                             "content": PLAN}}]}},
        {"name": "done", "when": {"lastUserMessage": "Write the plan", "afterToolResult": True},
         "reply": {"text": "Written."}},
        {"name": "watcher", "when": {"lastUserMessage": {"contains": "[watch]"}},
         "reply": {"text": "The plan has two steps."}},
    ]})

    done = project.run()

    assert done.code == 0, done.stderr
    assert target.read_text() == PLAN
    events = [json.loads(line) for line in (project.execution / ".hankweave" / "events"
                                            / "events.jsonl").read_text().splitlines()]
    (update,) = [e["data"] for e in events if e["type"] == "file.updated"]
    assert (update["path"], update["action"], update["bytes"]) == ("plan.md", "created",
                                                                    len(PLAN))
    assert update["source"]["kind"] == "tool_use"
    asked = [entry for entry in project.model_requests()
             if str(entry.get("rule") or "").endswith("(watcher)")]
    assert len(asked) == 1
    assert f"[watch] plan.md (created):\n{PLAN}" in json.dumps(asked[0]).replace("\\n", "\n")
