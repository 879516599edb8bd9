"""Agent sessions: the whole conversation, saved in the harness's folder so it can resume.

A session is one JSON file, ``.hankweave/harnesses/pi/sessions/<id>.json``: the messages in the
OpenAI chat format litellm takes (system prompt first, then user prompts, assistant messages
with their tool calls, tool results), rewritten durably (atomically, fsynced) whenever it gains
a message: the prompt, each assistant message before its tool calls run, and their results.  A
``continue-previous`` codon, or an extension, loads it and appends its prompt: the model sees
exactly the conversation it had, in this process or after a restart.  Resuming a session that is
not there fails the codon, as in the original.

The first pass of every attempt that resumes a session (``request.fork_session``) works on a
copy of it (:meth:`SessionStore.fork`): a new id, the messages as they were, the original file
untouched, so the turns of a failed, killed or timed-out attempt never reach the next attempt,
which copies the original again.  Extensions go on in the attempt's own copy.  A copy keeps the
tool ids of the history it copied (:attr:`Session.origins`).

A session cut while tools ran (the runtime cancelled the attempt, say to wait for a human's
answer to ``ask_human``) ends with an assistant message whose tool calls have no results yet:
:meth:`Session.pending_tool_calls` finds them, so the next attempt can run them again or close
them.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hankweave.api import PRIVATE_FILE_MODE, atomic_write_bytes, private_dir, utc_now_iso


class SessionNotFoundError(LookupError):
    """The session to resume has no file."""


@dataclass
class Session:
    id: str
    model: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    created_at: str = field(default_factory=utc_now_iso)
    origins: list[tuple[str, int]] = field(default_factory=list)
    """The sessions this one was copied from, oldest first, each with how many messages it had
    then: a message below that count is the one of that session, and keeps the tool ids it had
    there (the log of the attempt that made a call and of the one that resumes it agree)."""

    def origin_of(self, index: int) -> str:
        """The session the message at ``index`` was first made in."""
        for session_id, copied in self.origins:
            if index < copied:
                return session_id
        return self.id

    def rewritten(self) -> None:
        """The messages were rewritten (a compaction): none is at its copied index any more."""
        self.origins = []

    def pending_tool_calls(self) -> tuple[int, list[dict[str, Any]]]:
        """The tool calls the last assistant message made that have no result yet, and that
        message's index; ``(-1, [])`` when the conversation owes no result (it ends with a
        prompt, an answer, or every result)."""
        for index in range(len(self.messages) - 1, 0, -1):
            message = self.messages[index]
            if message.get("role") == "tool":
                continue
            if message.get("role") != "assistant":
                break
            answered = {m.get("tool_call_id") for m in self.messages[index + 1:]}
            calls = [call for call in message.get("tool_calls") or ()
                     if isinstance(call, dict) and call.get("id") not in answered]
            return (index, calls) if calls else (-1, [])
        return -1, []

    def add_tool_results(self, index: int, results: list[tuple[str, str]]) -> None:
        """Append ``(tool call id, text)`` results of the assistant message at ``index`` (the
        last one), keeping the results in the order of its calls: results of an earlier
        attempt may already be there, and the others come after them."""
        self.messages.extend({"role": "tool", "tool_call_id": call_id, "content": text}
                             for call_id, text in results)
        order = {call.get("id"): at for at, call in
                 enumerate(self.messages[index].get("tool_calls") or ()) if isinstance(call, dict)}
        self.messages[index + 1:] = sorted(
            self.messages[index + 1:], key=lambda m: order.get(m.get("tool_call_id"), len(order)))


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

    def fork(self, session_id: str) -> Session:
        """A copy of session ``session_id`` under a new id, saved before it is returned; the
        original stays as it is (a later attempt can copy it again)."""
        original = self.load(session_id)
        copy = Session(id=str(uuid.uuid4()), model=original.model,
                       messages=list(original.messages),
                       origins=[*original.origins, (original.id, len(original.messages))])
        self.save(copy)
        return copy

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
                       created_at=str(data.get("createdAt", "")),
                       origins=_origins(data.get("forkedFrom")))

    def save(self, session: Session) -> None:
        data = {"id": session.id, "model": session.model, "createdAt": session.created_at,
                "updatedAt": utc_now_iso(), "messages": session.messages}
        if session.origins:
            data["forkedFrom"] = [{"id": origin, "messages": copied}
                                  for origin, copied in session.origins]
        private_dir(self.folder)  # sessions hold the whole conversation: docs/state.md
        atomic_write_bytes(self.path(session.id),
                           json.dumps(data, ensure_ascii=False).encode("utf-8"),
                           mode=PRIVATE_FILE_MODE)


def _origins(value: Any) -> list[tuple[str, int]]:
    """``forkedFrom`` as saved (a session from before forks has none)."""
    if not isinstance(value, list):
        return []
    return [(str(item["id"]), int(item["messages"])) for item in value
            if isinstance(item, dict) and isinstance(item.get("id"), str)
            and isinstance(item.get("messages"), int)]
