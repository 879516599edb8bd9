"""Agent sessions: the whole conversation, saved in the harness's folder so it can resume.

A session is one JSON file, ``.hankweave/harnesses/pi/sessions/<id>.json``: the messages in the
OpenAI chat format litellm takes (system prompt first, then user prompts, assistant messages
with their tool calls, tool results), rewritten durably after every turn.  A ``continue-previous``
codon, or an extension, loads it and appends its prompt: the model sees exactly the conversation
it had, in this process or after a restart.  Resuming a session that is not there fails the
codon, as in the original.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hankweave.api import atomic_write_bytes, utc_now_iso


class SessionNotFoundError(LookupError):
    """The session to resume has no file."""


@dataclass
class Session:
    id: str
    model: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    created_at: str = field(default_factory=utc_now_iso)


class SessionStore:
    """The sessions of one execution (``<state_dir>/sessions/``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, session_id: str) -> Path:
        if not session_id or "/" in session_id or session_id.startswith("."):
            raise SessionNotFoundError(f"Session {session_id!r} is not a session id")
        return self.folder / f"{session_id}.json"

    def new(self, model: str, system_prompt: str) -> Session:
        return Session(id=str(uuid.uuid4()), model=model,
                       messages=[{"role": "system", "content": system_prompt}])

    def load(self, session_id: str) -> Session:
        path = self.path(session_id)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise SessionNotFoundError(
                f"No pi session {session_id} to resume (looked in {self.folder})") from None
        except (OSError, ValueError) as exc:
            raise SessionNotFoundError(f"Session file {path} is unreadable: {exc}") from None
        messages = data.get("messages") if isinstance(data, dict) else None
        if not isinstance(messages, list):
            raise SessionNotFoundError(f"Session file {path} has no messages")
        return Session(id=session_id, model=str(data.get("model", "")), messages=messages,
                       created_at=str(data.get("createdAt", "")))

    def save(self, session: Session) -> None:
        data = {"id": session.id, "model": session.model, "createdAt": session.created_at,
                "updatedAt": utc_now_iso(), "messages": session.messages}
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(self.path(session.id),
                           json.dumps(data, ensure_ascii=False).encode("utf-8"))
