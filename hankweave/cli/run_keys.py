"""The original's keys over ``hankweave run``'s live view: ``n`` next, ``s`` skip, ``f``
force-stop, ``l`` checkpoints, ``r`` a rollback menu, ``q`` stop (as Ctrl-C does).

Each key sends one command of the run's control server, exactly as ``hankweave ctl`` does from
a second shell (the execution's ``runtime.lock`` gives the address and the token; the server
hands it to the runtime's ``RuntimeCommands``, with the same rules and refusals).

Keys are read by :class:`KeyReader` only when stdin is a terminal: in cbreak mode (no echo, no
line buffering, signals kept: Ctrl-C still interrupts the run), on a background thread, and the
terminal's mode is restored on every way out (the ``with`` block, and ``atexit`` as a last
resort).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from hankweave.cli.progress import LiveView

__all__ = ["FOOTER", "Checkpoint", "Control", "KeyReader", "Reply", "RunKeys"]

FOOTER = "keys  n next  s skip  f force-stop  l checkpoints  r rollback  q stop"
_MENU_SIZE = 9
"""Checkpoints the rollback menu offers (keys 1-9), newest first."""
_LISTED = 10
"""Checkpoints ``l`` lists; the rest are counted."""
_COMMAND_TIMEOUT = 60.0
_KINDS = {"rig-setup": "before it ran", "completed": "as it completed",
          "error": "as it failed", "skipped": "as it was skipped"}


@dataclass(frozen=True)
class Reply:
    """What the control server answered to a command."""

    ok: bool
    message: str
    result: Any = None


@dataclass(frozen=True)
class Checkpoint:
    """One entry of ``checkpoint.list``."""

    codon_id: str
    kind: str
    sha: str
    status: str

    @property
    def described(self) -> str:
        return (f"{self.codon_id}  {_KINDS.get(self.kind, self.kind)}"
                f"  (checkpoint {self.sha[:8]})")


class Control:
    """Sends one command to the run's control server, as ``hankweave ctl`` does."""

    def __init__(self, execution: Path, *, timeout: float = _COMMAND_TIMEOUT) -> None:
        self.execution = execution
        self.timeout = timeout

    def send(self, command: str, data: dict[str, Any] | None = None) -> Reply:
        import asyncio

        from hankweave.server.client import (
            ControlClient,
            ControlRefusedError,
            NoServerError,
            server_address,
        )

        async def go() -> Reply:
            address = server_address(self.execution)
            client = await ControlClient.connect(address.url, token=address.token,
                                                 require_control=True)
            async with client:
                reply = await client.command(command, data, timeout=self.timeout)
            return Reply(reply.ok, reply.message, reply.result)

        try:
            return asyncio.run(go())
        except (NoServerError, ControlRefusedError) as exc:
            return Reply(False, str(exc))
        except TimeoutError:
            return Reply(False, f"no answer to {command} within {self.timeout:g}s")


class RunKeys:
    """What each key does: a command, the checkpoint listing, or a step of the rollback menu
    (choose a checkpoint, then ``y`` to confirm; any other key cancels)."""

    def __init__(self, view: LiveView, control: Control,
                 stop: Callable[[], None] = lambda: os.kill(os.getpid(), signal.SIGINT)) -> None:
        self.view = view
        self.control = control
        self.stop = stop
        self.menu: list[Checkpoint] | None = None
        self.chosen: Checkpoint | None = None

    def press(self, key: str) -> None:
        if self.chosen is not None:
            self._confirm(key)
        elif self.menu is not None:
            self._choose(key)
        elif key == "q":
            self.view.say("q: stopping the run (as Ctrl-C does)", "yellow")
            self.stop()
        elif key == "l":
            self._list()
        elif key == "r":
            self._open_menu()
        elif key in _COMMANDS:
            command, data = _COMMANDS[key]
            self._report(key, self.control.send(command, data))

    def _report(self, key: str, reply: Reply) -> None:
        self.view.say(f"{key}: {reply.message}", "dim" if reply.ok else "red")

    def _checkpoints(self, key: str) -> list[Checkpoint] | None:
        reply = self.control.send("checkpoint.list")
        if not reply.ok:
            self._report(key, reply)
            return None
        listing = (reply.result or {}).get("checkpoints") or []
        return [Checkpoint(str(entry.get("codonId")), str(entry.get("checkpointType")),
                           str(entry.get("sha")), str(entry.get("status"))) for entry in listing]

    def _list(self) -> None:
        found = self._checkpoints("l")
        if found is None:
            return
        if not found:
            self.view.say("l: no checkpoints yet", "dim")
            return
        self.view.say("l: checkpoints, newest first:", "bold")
        for entry in found[:_LISTED]:
            self.view.say(f"   {entry.described}  {entry.status}")
        if len(found) > _LISTED:
            self.view.say(f"   and {len(found) - _LISTED} more (hankweave ctl -e"
                          f" {self.control.execution} checkpoints)", "dim")

    def _open_menu(self) -> None:
        found = self._checkpoints("r")
        if found is None:
            return
        if not found:
            self.view.say("r: no checkpoints to roll back to", "dim")
            return
        self.menu = found[:_MENU_SIZE]
        self._show(["Roll back to which checkpoint? (a number; any other key cancels)"] + [
            f"  {n}  {entry.described}" for n, entry in enumerate(self.menu, start=1)])

    def _choose(self, key: str) -> None:
        assert self.menu is not None
        if key.isdigit() and 1 <= int(key) <= len(self.menu):
            self.chosen = self.menu[int(key) - 1]
            self._show([f"Roll back to {self.chosen.described}?",
                        "  The workspace returns to it; what came after is undone.",
                        "  y/N (y rolls back, any other key cancels)"])
            return
        self._close("r: rollback cancelled")

    def _confirm(self, key: str) -> None:
        chosen = self.chosen
        assert chosen is not None
        if key.lower() != "y":
            self._close("r: rollback cancelled")
            return
        self._close(None)
        self._report("r", self.control.send("rollback.toCheckpoint",
                                            {"checkpointSha": chosen.sha}))

    def _show(self, lines: list[str]) -> None:
        self.view.overlay = lines
        self.view.refresh()

    def _close(self, message: str | None) -> None:
        self.menu, self.chosen = None, None
        self._show([])
        if message:
            self.view.say(message, "dim")


_COMMANDS: dict[str, tuple[str, dict[str, Any] | None]] = {
    "n": ("codon.next", None),
    "s": ("codon.skip", None),
    "f": ("codon.forceStop", {"reason": "f pressed in the live view"}),
}


class KeyReader:
    """Reads single keys from a terminal on a background thread, in cbreak mode.

    Inactive (reads nothing, changes nothing) when ``stream`` is not a terminal."""

    def __init__(self, stream: TextIO, on_key: Callable[[str], None]) -> None:
        self.stream = stream
        self.on_key = on_key
        self._saved: list[Any] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        import termios
        import tty

        try:
            fd = self.stream.fileno()
        except (AttributeError, OSError, ValueError):
            return
        if not os.isatty(fd) or self._thread is not None:
            return
        self._saved = termios.tcgetattr(fd)
        atexit.register(self.restore)
        tty.setcbreak(fd)  # ISIG stays on: Ctrl-C still sends SIGINT
        self._thread = threading.Thread(target=self._read, args=(fd,), name="hankweave-keys",
                                        daemon=True)
        self._thread.start()

    def _read(self, fd: int) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([fd], [], [], 0.1)
            if not ready:
                continue
            try:
                key = os.read(fd, 1).decode("utf-8", "replace")
            except OSError:
                return
            if not key:
                return  # the terminal went away
            try:
                self.on_key(key)
            except Exception as exc:  # a key must never end the run
                import logging

                logging.getLogger("hankweave").warning("key %r failed: %r", key, exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)
        self.restore()

    def restore(self) -> None:
        """Give the terminal its mode back (once; safe to call again)."""
        import termios

        saved, self._saved = self._saved, None
        if saved is None:
            return
        with contextlib.suppress(OSError, ValueError, termios.error):  # the terminal is gone
            termios.tcsetattr(self.stream.fileno(), termios.TCSADRAIN, saved)
        atexit.unregister(self.restore)

    def __enter__(self) -> KeyReader:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
