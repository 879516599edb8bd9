"""What the page may change: control commands to a live run, and answers to interruptions.

A control command goes to the runtime's WebSocket server with the control token of its
``runtime.lock``, which only this process reads; the page sends the dashboard's own control key
instead (see :mod:`hankweave_dashboard.app`).  Each request body is a pydantic model, so a
malformed one is refused with what is wrong.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    model_validator,
)

from hankweave_dashboard.catalog import run_command

if TYPE_CHECKING:
    from hankweave.api import GivenAnswer, RecordedAnswer

CONTROL_TIMEOUT_S = 30.0


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ControlBody(_Body):
    action: Literal["skip", "stop", "next", "redo", "start", "rollback"]
    codon_id: str | None = Field(default=None, alias="codonId", min_length=1)
    reason: str | None = Field(default=None, max_length=2000)
    checkpoint_type: Literal["start", "end", "rig-setup", "completed", "error", "skipped"] = \
        Field(default="end", alias="checkpointType")
    auto_restart: bool = Field(default=False, alias="autoRestart")

    @model_validator(mode="after")
    def _codon_when_needed(self) -> ControlBody:
        if self.action in ("start", "rollback") and not self.codon_id:
            raise ValueError(f"{self.action} needs a codonId")
        return self

    def command(self) -> tuple[str, dict[str, Any] | None]:
        """The WebSocket command and its data."""
        if self.action == "start":
            return "codon.start", {"codonId": self.codon_id}
        if self.action == "rollback":
            return "rollback.toCodon", {"codonId": self.codon_id,
                                        "checkpointType": self.checkpoint_type,
                                        "autoRestart": self.auto_restart}
        if self.action == "stop":
            return "codon.forceStop", {"reason": self.reason} if self.reason else None
        return {"skip": "codon.skip", "next": "codon.next", "redo": "codon.redo"}[
            self.action], None


class AnswerBody(_Body):
    answer: Any = None
    """Text, or any JSON value."""
    approve: bool = False
    reject: bool = False
    extend: StrictStr | StrictFloat | StrictInt | None = None
    """A budget ask's extension, in its ceiling's unit (``"1.50"``, ``1.5``, ``"90s"``)."""
    by: str | None = Field(default=None, max_length=200)

    @model_validator(mode="after")
    def _exactly_one(self) -> AnswerBody:
        given = sum([self.answer is not None, self.approve, self.reject,
                     self.extend is not None])
        if given != 1:
            raise ValueError("give exactly one of answer, approve, reject and extend")
        return self

    def given(self) -> GivenAnswer:
        """The answer in the kernel's form (checked against the interruption there)."""
        from hankweave.api import GivenAnswer

        if self.extend is not None:
            return GivenAnswer(extend=str(self.extend))
        if isinstance(self.answer, str):
            return GivenAnswer(text=self.answer)
        if self.answer is not None:
            return GivenAnswer(json_text=json.dumps(self.answer))
        return GivenAnswer(approve=self.approve, reject=self.reject)


class ActionRefused(Exception):
    """The runtime (or the answer's rules) refused; the message says why (HTTP 409)."""


class NoRuntime(Exception):
    """No runtime runs the execution, so there is nothing to control (HTTP 409)."""


async def control(path: Path, body: ControlBody) -> dict[str, Any]:
    from hankweave.api import ControlClient, ControlRefusedError, NoServerError, server_address

    command, data = body.command()
    try:
        address = server_address(path)
        client = await ControlClient.connect(address.url, token=address.token,
                                             require_control=True)
        async with client:
            reply = await client.command(command, data, timeout=CONTROL_TIMEOUT_S)
    except NoServerError as exc:
        raise NoRuntime(str(exc)) from None
    except ControlRefusedError as exc:
        raise ActionRefused(f"the runtime refused control: {exc}") from None
    except TimeoutError:
        raise ActionRefused(f"the runtime did not answer {command} within"
                            f" {CONTROL_TIMEOUT_S:g} s") from None
    if not reply.ok:
        raise ActionRefused(reply.message)
    return {"ok": True, "command": command, "message": reply.message, "result": reply.result}


async def answer(path: Path, interruption_id: str, body: AnswerBody) -> dict[str, Any]:
    recorded = await give(path, interruption_id, body.given(), body.by or "dashboard")
    note = ("sent to the running runtime: its run goes on" if recorded.forwarded else
            f"recorded: the next run resumes with it ({run_command(path)})")
    return {"ok": True, "answer": recorded.answer, "forwarded": recorded.forwarded,
            "message": f"Answered {interruption_id}: {note}"}


async def give(path: Path, interruption_id: str, given: GivenAnswer, who: str,
               ) -> RecordedAnswer:
    """Answer ``interruption_id`` through the kernel (:func:`hankweave.api.answer_interruption`:
    sent to the runtime running the execution, else recorded under its lock); a refusal is
    :class:`ActionRefused` and changes nothing."""
    from hankweave.api import AnswerError, LockError, StateLoadError, answer_interruption

    try:
        # It runs its own event loop (a WebSocket exchange, or the lock and a transition).
        return await asyncio.to_thread(answer_interruption, path, interruption_id, given, who)
    except (AnswerError, LockError, StateLoadError) as exc:  # a lock held by another command
        raise ActionRefused(str(exc)) from None
