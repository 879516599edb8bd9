"""A note as the bytes a receiver gets: hankweave's own JSON, or a Slack incoming-webhook body.

``json`` (docs/webhooks.md, "The payload")::

    {"event": "interruption.created", "id": "<event id>", "execution": "/abs/exec",
     "runId": "...", "timestamp": "2026-...Z", "summary": "codon deploy waits for approval: ...",
     "data": {...the event's data...},
     "links": [{"action": "approve", "label": "approve", "url": "https://dash/act#TOKEN"}, ...]}

``slack``: ``{"text": ..., "blocks": [...]}``, the summary as the notification's text and a
section block, the execution and run as context, and the links as buttons.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import PurePath
from typing import Any

from hankweave_sink_webhook.notes import Note

CONTENT_TYPE = "application/json"


def json_body(note: Note) -> bytes:
    payload: dict[str, Any] = {"event": note.event, "id": note.id, "execution": note.execution,
                               "runId": note.run_id, "timestamp": note.timestamp,
                               "summary": note.summary, "data": note.data}
    if note.links:
        payload["links"] = note.links
    return _dumps(payload)


_BUTTON_STYLES = {"approve": "primary", "reject": "danger"}


def slack_body(note: Note) -> bytes:
    """A Slack incoming webhook's body (Block Kit): mrkdwn escaped, links as URL buttons."""
    where = PurePath(note.execution).name if note.execution else None
    title = f"hankweave · {where}" if where else "hankweave"
    text = f"[{_escape(title)}] {_escape(note.summary)}"
    if note.links:
        text += " — " + ", ".join(f"<{link['url']}|{_escape(link['label'])}>"
                                  for link in note.links)
    context = " · ".join(_escape(part) for part in (
        note.event, f"run {note.run_id}" if note.run_id else None, note.execution) if part)
    blocks: list[dict[str, Any]] = [
        # verbatim: Slack neither links URLs nor turns names into mentions in what an agent
        # wrote (a question, an option).
        {"type": "section", "text": {"type": "mrkdwn", "verbatim": True,
                                      "text": f"*{_escape(title)}*\n{_escape(note.summary)}"}},
        {"type": "context", "elements": [{"type": "mrkdwn", "verbatim": True,
                                          "text": context}]},
    ]
    if note.links:
        buttons = []
        for number, link in enumerate(note.links):
            button: dict[str, Any] = {
                "type": "button", "action_id": f"hankweave-{link['action']}-{number}",
                "text": {"type": "plain_text", "text": str(link["label"])[:75]},
                "url": link["url"]}
            if link["action"] in _BUTTON_STYLES:
                button["style"] = _BUTTON_STYLES[link["action"]]
            buttons.append(button)
        blocks.append({"type": "actions", "elements": buttons})
    return _dumps({"text": text, "blocks": blocks})


FORMATS: dict[str, Callable[[Note], bytes]] = {"json": json_body, "slack": slack_body}


def _escape(text: str) -> str:
    """Slack's mrkdwn: ``&``, ``<`` and ``>`` are control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _dumps(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"),
                      default=str).encode("utf-8")


__all__ = ["CONTENT_TYPE", "FORMATS", "json_body", "slack_body"]
