"""The live-control protocol: typed schemas for every client message and every direct reply.

A client speaks JSON over one WebSocket.  Its first message is a ``handshake``; then it sends
commands, each ``{"type": ..., "id": ..., "data": {...}}``.  The server sends events (the
:class:`~hankweave.events.catalogue.ServerEvent` envelope) and three kinds of direct replies:
``handshake.response``, ``command.response`` (a command was carried out) and ``error`` events
whose ``code`` says why a message was refused.  ``docs/websocket.md`` is the full description;
this module is the schema, and :func:`parse_client_message` the one way a frame becomes a
command.

Compatibility with Hankweave 0.10.0: the command types and their ``data`` are the original's
(``server/command-schemas.ts``).  Additions: ``handshake.data.afterSeq`` and ``token``,
``history.sync.data.afterSeq``, the ``command.response`` acknowledgement, and error ``code``\\ s
for every refusal (the original refused some commands silently).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, TypeAlias

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    StrictFloat,
    StrictInt,
    TypeAdapter,
    ValidationError,
)
from pydantic.alias_generators import to_camel

from hankweave.events.catalogue import ServerEvent, make_event, new_event_id
from hankweave.fsutil import utc_now_iso

__all__ = [
    "COMMAND_TYPES",
    "CONTROL_COMMANDS",
    "DEFAULT_MAX_FRAME",
    "READ_ONLY_COMMANDS",
    "CheckpointListCommand",
    "ClientMessage",
    "ClientMode",
    "CodonForceStopCommand",
    "CodonNextCommand",
    "CodonRedoCommand",
    "CodonSkipCommand",
    "CodonStartCommand",
    "CommandResponse",
    "CommandResponseData",
    "ErrorCode",
    "HandshakeData",
    "HandshakeMessage",
    "HandshakeResponse",
    "HandshakeResponseData",
    "HistorySyncCommand",
    "InterruptionAnswerCommand",
    "PingBroadcastCommand",
    "PingCommand",
    "ProtocolError",
    "RollbackToCheckpointCommand",
    "RollbackToCodonCommand",
    "RollbackToLastSuccessCommand",
    "ServerForceShutdownCommand",
    "ServerShutdownCommand",
    "command_response",
    "error_event",
    "parse_client_message",
]

DEFAULT_MAX_FRAME = 1024 * 1024
"""Largest client message the server reads (1 MiB); larger ones are refused."""

ClientMode: TypeAlias = Literal["readonly", "readandwrite"]
"""What a connection may do: watch (and ping, and sync history), or also control the run."""

ErrorCode: TypeAlias = Literal[
    "INVALID_JSON",
    "INVALID_COMMAND",
    "UNKNOWN_COMMAND",
    "FRAME_TOO_LARGE",
    "HANDSHAKE_REQUIRED",
    "TOKEN_REQUIRED",
    "INVALID_TOKEN",
    "INSUFFICIENT_PERMISSIONS",
    "NO_RUNTIME",
    "SHUTTING_DOWN",
    "ROLLBACK_IN_PROGRESS",
    "COMMAND_REFUSED",
    "COMMAND_FAILED",
    "HISTORY_UNAVAILABLE",
    "CLIENT_TOO_SLOW",
]
"""Why the server refused a message (the ``code`` of its ``error`` reply).

``HANDSHAKE_REQUIRED``, ``INSUFFICIENT_PERMISSIONS`` and ``ROLLBACK_IN_PROGRESS`` are the
original's; the others are ours."""

# Severity of each refusal, as the original's `error` event carries it.  A refusal is never
# fatal: the runtime is unaffected by what one client sends.
_SEVERITY: dict[str, Literal["operation", "warning"]] = {
    "TOKEN_REQUIRED": "warning",
    "HISTORY_UNAVAILABLE": "warning",
}


class ProtocolError(Exception):
    """A client message refused before it reached the runtime; becomes an ``error`` reply."""

    def __init__(self, code: ErrorCode, message: str, *, command: str | None = None,
                 command_id: str | None = None) -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message
        self.command = command
        self.command_id = command_id


# ----- client messages -----


class _Wire(BaseModel):
    """camelCase on the wire; unknown keys in ``data`` are refused (a typo is not ignored)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True,
                              serialize_by_alias=True, extra="forbid", frozen=True)


class _Envelope(_Wire):
    """``{type, id, data}``.  Other top-level keys (client metadata) are ignored."""

    model_config = ConfigDict(extra="ignore")

    id: str | None = None
    """The client's id for the command; replies carry it as ``commandId``."""


class NoData(_Wire):
    """``data`` of a command that takes none (``{}`` or left out)."""


class ReasonData(_Wire):
    reason: str | None = None


class _NoDataCommand(_Envelope):
    """A command whose ``data`` is empty; each subclass narrows ``type`` to its own."""

    type: str
    data: NoData = Field(default_factory=NoData)


class _ReasonCommand(_Envelope):
    """A command whose ``data`` may give a reason; each subclass narrows ``type``."""

    type: str
    data: ReasonData = Field(default_factory=ReasonData)


class HandshakeData(_Wire):
    mode: Literal["readonly", "read-only", "readandwrite", "read-write"] | None = None
    """Asked mode; ``read-write`` modes need :attr:`token`.  Default: read-write when a token
    is given, else read-only."""
    send_previous_events: bool = False
    """Put the last events (oldest first) in ``handshake.response.eventHistory``."""
    after_seq: NonNegativeInt | None = None
    """Send every journaled event after this seq (``history.batch`` messages, oldest first),
    then live events: nothing missed, nothing twice.  0 sends the whole journal."""
    token: str | None = Field(default=None, repr=False)
    """The control token of ``runtime.lock``."""

    @property
    def requested_mode(self) -> ClientMode:
        if self.mode is None:
            return "readandwrite" if self.token else "readonly"
        return "readonly" if self.mode in ("readonly", "read-only") else "readandwrite"


class HandshakeMessage(_Envelope):
    type: Literal["handshake"]
    data: HandshakeData = Field(default_factory=HandshakeData)


class CodonStartData(_Wire):
    codon_id: Annotated[str, Field(min_length=1)]
    skip_pre_commands: bool = False
    """Skip the codon's rig setup (its files are already in place)."""


class CodonStartCommand(_Envelope):
    type: Literal["codon.start"]
    data: CodonStartData


class CodonNextCommand(_NoDataCommand):
    type: Literal["codon.next"]


class CodonSkipCommand(_NoDataCommand):
    type: Literal["codon.skip"]


class CodonRedoCommand(_NoDataCommand):
    type: Literal["codon.redo"]


class CodonForceStopCommand(_ReasonCommand):
    type: Literal["codon.forceStop"]


class InterruptionAnswerData(_Wire):
    """An answer to a pending interruption: ``answer`` (text or any JSON value),
    ``approve`` / ``reject``, or ``extend`` (a budget ceiling's amount; exactly one, as
    ``hankweave answer``)."""

    interruption_id: Annotated[str, Field(min_length=1)]
    answer: Any = None
    approve: bool = False
    reject: bool = False
    extend: Annotated[str, Field(min_length=1, max_length=40)] | StrictFloat | StrictInt | None \
        = None
    answered_by: str | None = None
    """Who answers, as recorded (default ``websocket:<the connection's id>``)."""


class InterruptionAnswerCommand(_Envelope):
    """Ours: answer an interruption of the running runtime (docs/human-in-the-loop.md)."""

    type: Literal["interruption.answer"]
    data: InterruptionAnswerData


class CheckpointListData(_Wire):
    run_id: str | None = None


class CheckpointListCommand(_Envelope):
    type: Literal["checkpoint.list"]
    data: CheckpointListData = Field(default_factory=CheckpointListData)


class RollbackToCheckpointData(_Wire):
    checkpoint_sha: Annotated[str, Field(min_length=4, pattern=r"^[0-9A-Za-z._-]+$")]
    auto_restart: bool = False


class RollbackToCheckpointCommand(_Envelope):
    type: Literal["rollback.toCheckpoint"]
    data: RollbackToCheckpointData


class RollbackToCodonData(_Wire):
    codon_id: Annotated[str, Field(min_length=1)]
    checkpoint_type: Literal["start", "end", "rig-setup", "completed", "error", "skipped"] = "end"
    auto_restart: bool = False


class RollbackToCodonCommand(_Envelope):
    type: Literal["rollback.toCodon"]
    data: RollbackToCodonData


class AutoRestartData(_Wire):
    auto_restart: bool = False


class RollbackToLastSuccessCommand(_Envelope):
    type: Literal["rollback.toLastSuccess"]
    data: AutoRestartData = Field(default_factory=AutoRestartData)


class ServerShutdownCommand(_ReasonCommand):
    type: Literal["server.shutdown"]


class ServerForceShutdownCommand(_ReasonCommand):
    type: Literal["server.force_shutdown"]


class PingCommand(_NoDataCommand):
    type: Literal["ping"]


class PingBroadcastCommand(_NoDataCommand):
    type: Literal["ping.broadcast"]


class HistorySyncData(_Wire):
    after_seq: NonNegativeInt | None = None
    """Only events after this seq (default: the whole journal)."""


class HistorySyncCommand(_Envelope):
    type: Literal["history.sync"]
    data: HistorySyncData = Field(default_factory=HistorySyncData)


ClientMessage: TypeAlias = Annotated[
    HandshakeMessage
    | CodonStartCommand
    | CodonNextCommand
    | CodonSkipCommand
    | CodonRedoCommand
    | CodonForceStopCommand
    | InterruptionAnswerCommand
    | CheckpointListCommand
    | RollbackToCheckpointCommand
    | RollbackToCodonCommand
    | RollbackToLastSuccessCommand
    | ServerShutdownCommand
    | ServerForceShutdownCommand
    | PingCommand
    | PingBroadcastCommand
    | HistorySyncCommand,
    Field(discriminator="type"),
]
"""Every message a client may send, discriminated on ``type``."""

_CLIENT_MESSAGE: TypeAdapter[ClientMessage] = TypeAdapter(ClientMessage)

COMMAND_TYPES: frozenset[str] = frozenset({
    "handshake", "codon.start", "codon.next", "codon.skip", "codon.redo", "codon.forceStop",
    "checkpoint.list", "rollback.toCheckpoint", "rollback.toCodon", "rollback.toLastSuccess",
    "server.shutdown", "server.force_shutdown", "ping", "ping.broadcast", "history.sync",
    "interruption.answer",
})
"""Every message ``type`` a client may send."""

READ_ONLY_COMMANDS: frozenset[str] = frozenset({"ping", "history.sync", "checkpoint.list"})
"""What a read-only connection may send (besides ``handshake``).

Unlike the original, ``server.shutdown`` and ``server.force_shutdown`` are not here: a
watcher cannot stop the run (reference quirk 4)."""

CONTROL_COMMANDS: frozenset[str] = COMMAND_TYPES - READ_ONLY_COMMANDS - {"handshake"}
"""Commands that need a read-write connection (the control token)."""


def parse_client_message(raw: str | bytes, *, max_frame: int = DEFAULT_MAX_FRAME) -> ClientMessage:
    """Turn one WebSocket message into a typed client message.

    Raises:
        ProtocolError: ``FRAME_TOO_LARGE`` (over ``max_frame`` bytes), ``INVALID_JSON``,
            ``UNKNOWN_COMMAND`` (a ``type`` no command has) or ``INVALID_COMMAND`` (not an
            object with a ``type``, or ``data`` that does not fit the command; the message
            names each bad field).  ``command`` and ``command_id`` are set when the message
            shows them, so the reply can be matched to the command.
    """
    size = len(raw) if isinstance(raw, bytes) else _utf8_length(raw, max_frame)
    if size > max_frame:
        raise ProtocolError("FRAME_TOO_LARGE", f"Message of {size} bytes refused: the limit is"
                                               f" {max_frame} bytes")
    try:
        obj = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError("INVALID_JSON", f"Message is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("INVALID_COMMAND", "A message is a JSON object with a \"type\"")
    command = obj.get("type")
    command_id = obj.get("id") if isinstance(obj.get("id"), str) else None
    if not isinstance(command, str):
        raise ProtocolError("INVALID_COMMAND", "A message is a JSON object with a \"type\"",
                            command_id=command_id)
    if command not in COMMAND_TYPES:
        raise ProtocolError("UNKNOWN_COMMAND",
                            f"Unknown command type {command!r}; known: "
                            + ", ".join(sorted(COMMAND_TYPES)),
                            command=command, command_id=command_id)
    if obj.get("data") is None:
        obj = {key: value for key, value in obj.items() if key != "data"}
    try:
        return _CLIENT_MESSAGE.validate_python(obj)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc'][1:]) or '<message>'}: {error['msg']}"
            for error in exc.errors(include_url=False))
        raise ProtocolError("INVALID_COMMAND", f"Invalid {command} command: {problems}",
                            command=command, command_id=command_id) from None


def _utf8_length(text: str, limit: int) -> int:
    # A character is at most 4 UTF-8 bytes: encode only when the length could be over.
    if len(text) > limit or len(text) * 4 <= limit:
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


# ----- server replies -----


class HandshakeResponseData(_Wire):
    client_id: str
    mode: ClientMode
    """The mode granted (read-only unless the handshake carried the right token)."""
    event_history: list[dict[str, Any]]
    """With ``sendPreviousEvents``: the last events, oldest first (the original: newest
    first)."""
    total_events: int
    """Events journaled when the client joined (the original's count)."""
    last_seq: int
    """The seq of the last event before this client's live stream: every event with a larger
    seq is delivered live, and ``history.sync`` covers the rest."""


class HandshakeResponse(_Wire):
    """The answer to a handshake (no ``id``/``timestamp``, as in the original)."""

    type: Literal["handshake.response"] = "handshake.response"
    data: HandshakeResponseData


class CommandResponseData(_Wire):
    command_id: str | None
    command: str
    ok: Literal[True] = True
    message: str
    result: dict[str, Any] | None = None
    """What the command produced, for commands that answer (``checkpoint.list``)."""


class CommandResponse(_Wire):
    """A command was carried out (its effects follow as events)."""

    id: str
    timestamp: str
    type: Literal["command.response"] = "command.response"
    data: CommandResponseData


def command_response(command: str, command_id: str | None, message: str,
                     result: dict[str, Any] | None = None) -> CommandResponse:
    """The acknowledgement of a command that was carried out."""
    return CommandResponse(id=new_event_id(), timestamp=utc_now_iso(), data=CommandResponseData(
        command_id=command_id, command=command, message=message, result=result))


def error_event(code: ErrorCode, message: str, *, command: str | None = None,
                command_id: str | None = None) -> ServerEvent:
    """The ``error`` event that answers a refused message (sent to its sender only).

    ``context`` carries ``command`` and ``commandId`` so a client matches it to what it sent.
    """
    context = {key: value for key, value in (("command", command), ("commandId", command_id))
               if value is not None}
    data: dict[str, Any] = {"message": message, "fatal": False,
                            "severity": _SEVERITY.get(code, "operation"), "code": code}
    if context:
        data["context"] = context
    return make_event("error", data)
