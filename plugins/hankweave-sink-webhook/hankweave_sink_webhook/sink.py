"""The ``webhook`` event sink: signed notifications of a run's moments to HTTP receivers.

Enable it in ``hankweave.json``::

    {"events": {"sinks": [{"name": "webhook", "config": {
        "urls": ["https://hooks.example.com/hankweave"], "secretFile": "~/.config/hankweave/webhook-secret",
        "dashboardUrl": "http://127.0.0.1:7777"}}]}}

By default a person hears of a pause (``interruption.created``), its answer, a run's end
(``run.ended``, made from the transition that ends it) and a budget warning; ``events`` names
others.  Each message is JSON (or a Slack body, ``"format": "slack"``) signed with HMAC-SHA256
(:mod:`hankweave_sink_webhook.signing`); a message about a pause carries signed links that
answer it on the dashboard (:mod:`hankweave_sink_webhook.actions`).  ``handle`` only queues:
each URL has its own bounded queue and sender thread (:mod:`hankweave_sink_webhook.outbox`),
so a receiver that is down or slow never holds up the sink's worker, nor the run.

docs/webhooks.md is the user's guide: the payload, the headers, a receiver that verifies.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import BeforeValidator, Field, SecretStr, field_validator, model_validator

from hankweave.api import EventSink, SinkConfig

if TYPE_CHECKING:
    from hankweave_sink_webhook.notes import Composer
    from hankweave_sink_webhook.outbox import Counts, Outbox

log = logging.getLogger("hankweave.sink.webhook")


def _http_url(value: object) -> str:
    """An absolute http(s) URL with a host and no credentials.  The messages never quote the
    value: a webhook URL's path is often its secret."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be an http or https URL (a string such as"
                         " \"https://hooks.example.com/hankweave\")")
    text = value.strip()
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises for a port that is not a number
    except ValueError:
        raise ValueError("is not a URL that can be read (check its host and port)") from None
    if parts.scheme.lower() not in ("http", "https"):
        other = f', not "{parts.scheme}:"' if parts.scheme.isalnum() and parts.netloc else ""
        raise ValueError(f"must start with http:// or https://{other}")
    if not parts.hostname:
        raise ValueError("must name a host (https://HOST/...)")
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not hold credentials (user:password@): receivers check the"
                         " X-Hankweave-Signature of the secret instead")
    if any(character.isspace() for character in text):
        raise ValueError("must not contain spaces")
    return text


def _event_name(value: object) -> str:
    if not isinstance(value, str) or not _EVENT_NAME.fullmatch(value):
        raise ValueError('must be an event\'s name, such as "run.ended" or "codon.completed"')
    return value


HttpUrl = Annotated[str, BeforeValidator(_http_url)]
EventName = Annotated[str, BeforeValidator(_event_name)]
_EVENT_NAME = re.compile(r"[a-z][A-Za-z0-9]*(\.[a-z][A-Za-z0-9]*)*")
DEFAULT_EVENTS = ("interruption.created", "interruption.answered", "run.ended", "budget.warning")
"""What a person wants to hear of: a pause, its answer, a run's end, a budget running low."""


def _read_secret_file(path: Path) -> bytes:
    """The secret in ``path``; :class:`ValueError` when others could read it or it is empty
    (the message names the file, never its content)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise ValueError(f"secretFile {path}: cannot be read ({exc.strerror or exc}; a symlink"
                         " is refused)") from None
    with os.fdopen(descriptor, "rb") as handle:
        found = os.fstat(handle.fileno())
        if not stat.S_ISREG(found.st_mode) or found.st_uid != os.getuid() \
                or found.st_mode & 0o077:
            raise ValueError(f"secretFile {path}: must be a file of yours, readable only by you"
                             f" (chmod 600 {path})")
        secret = handle.read(65536).strip()
    if not secret:
        raise ValueError(f"secretFile {path}: is empty")
    return secret


class WebhookSink(EventSink):
    name: ClassVar[str] = "webhook"
    flush_timeout_s: float = 3.0
    """How long the end of a run waits for the messages still being sent (a receiver that
    fails meanwhile ends it at once: see :mod:`hankweave_sink_webhook.outbox`)."""

    class Config(SinkConfig):
        urls: list[HttpUrl] = Field(min_length=1)
        """Where each message is POSTed (http or https); every URL gets every message."""
        events: list[EventName] = Field(default_factory=lambda: list(DEFAULT_EVENTS),
                                        min_length=1)
        """The events to send, by name: event types of the journal (docs/events.md) and
        ``run.ended``."""
        secret: SecretStr | None = None
        """The HMAC secret, written here (prefer ``secretFile``: a settings file is easily
        shared)."""
        secret_file: Path | None = None
        """A file holding the HMAC secret, readable only by you; read when the run starts.
        Under your home it is hidden from sandboxed agents (docs/sandbox.md)."""
        secret_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
        """The environment variable holding the HMAC secret; read when the run starts.  Not a
        ``HANKWEAVE_<X>`` name: those are passed to agents as ``<X>``."""
        timeout_seconds: float = Field(default=5.0, gt=0, le=120)
        """How long one request may take (connecting, sending, the answer)."""
        max_attempts: int = Field(default=5, ge=1, le=20)
        """Attempts per message and URL, the first included (see the retry policy)."""
        queue_size: int = Field(default=1000, ge=1, le=1_000_000)
        """Messages waiting per URL at most; when full, the oldest is dropped and counted."""
        dashboard_url: HttpUrl | None = None
        """The hankweave dashboard's base URL: messages about a pause then carry signed links
        that answer it there (approve, reject, extend)."""
        link_ttl_seconds: float = Field(default=86400.0, gt=0, le=30 * 86400)
        """How long an action link works."""
        format: Literal["json", "slack"] = "json"
        """``json`` (hankweave's payload) or ``slack`` (a Slack incoming webhook's body)."""

        field_messages: ClassVar[dict[str, str]] = {
            # Not worded "urls ...": the kernel would quote the value, and a webhook URL is
            # often a secret (Slack's).
            "urls": "give urls as a list of at least one http or https URL to send messages to",
        }

        @field_validator("secret", mode="before")
        @classmethod
        def _secret_is_text(cls, value: object) -> object:
            # Checked before SecretStr sees it: pydantic's own error would quote the value.
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError("secret must be a non-empty string (better: name a variable"
                                 " holding it with secretEnv)")
            return value

        @field_validator("secret_env")
        @classmethod
        def _not_for_agents(cls, value: str | None) -> str | None:
            if value is not None and value.startswith("HANKWEAVE_") and not value.startswith(
                    ("HANKWEAVE_RUNTIME_", "HANKWEAVE_SENTINEL_")):
                raise ValueError(f"{value} would reach every agent (a HANKWEAVE_<X> variable"
                                 " is passed to agents as <X>): name another variable, or use"
                                 " secretFile")
            return value

        @model_validator(mode="after")
        def _one_secret(self) -> WebhookSink.Config:
            given = [self.secret, self.secret_file, self.secret_env]
            if sum(value is not None for value in given) > 1:
                raise ValueError("give one of secret, secretFile and secretEnv")
            return self

    config: Config

    def __init__(self, config: SinkConfig | None = None, **outbox_options: Any) -> None:
        """``outbox_options`` go to each URL's :class:`~hankweave_sink_webhook.outbox.Outbox`
        (tests pass ``backoff`` and ``post``).  Raises :class:`ValueError` when ``secretEnv``
        names a variable that is not set."""
        from hankweave_sink_webhook.actions import ActionLinks
        from hankweave_sink_webhook.formats import FORMATS
        from hankweave_sink_webhook.notes import Composer
        from hankweave_sink_webhook.outbox import Delivery, Outbox, receiver_label

        super().__init__(config)
        settings = self.config
        secret = self._secret(settings)
        links = (ActionLinks(settings.dashboard_url, settings.link_ttl_seconds)
                 if settings.dashboard_url else None)
        self._composer: Composer = Composer(settings.events, links=links)
        self._render = FORMATS[settings.format]
        self._delivery = Delivery
        labels = [receiver_label(url) for url in settings.urls]
        if len(labels) > 1:
            labels = [f"urls[{index}] {label}" for index, label in enumerate(labels)]
        self._outboxes: list[Outbox] = [
            Outbox(url, label=label, secret=secret, capacity=settings.queue_size,
                   max_attempts=settings.max_attempts, timeout_s=settings.timeout_seconds,
                   **outbox_options)
            for url, label in zip(settings.urls, labels, strict=True)]
        self._closed = False

    @staticmethod
    def _secret(settings: WebhookSink.Config) -> bytes | None:
        if settings.secret is not None:
            return settings.secret.get_secret_value().encode("utf-8")
        if settings.secret_file is not None:
            return _read_secret_file(settings.secret_file.expanduser())
        if settings.secret_env is None:
            return None
        value = os.environ.get(settings.secret_env, "")
        if not value.strip():
            raise ValueError(f"secretEnv names {settings.secret_env}, which is not set (or empty)"
                             " in this environment")
        return value.encode("utf-8")

    def bind(self, execution_dir: Path) -> None:
        """Tell the sink its execution directory before the first event.  Without it, the
        sink reads the directory from the run's ``RunStarted`` transition."""
        self._composer.bind(execution_dir)

    def handle(self, event: Mapping[str, Any]) -> None:
        if self._closed:
            return
        for note in self._composer.compose(event):
            delivery = self._delivery(note.event, note.id, self._render(note))
            for outbox in self._outboxes:
                outbox.put(delivery)

    def close(self) -> None:
        """Give the messages still being sent ``flush_timeout_s`` at most, then stop; what was
        lost is logged, and said once on stderr."""
        if self._closed:
            return
        self._closed = True
        deadline = time.monotonic() + self.flush_timeout_s
        for outbox in self._outboxes:
            outbox.close(deadline)
        for outbox in self._outboxes:
            outbox.join(deadline)
        for outbox in self._outboxes:
            counts = outbox.counts
            if counts.lost:
                summary = (f"webhook sink: {counts.lost} message(s) were not delivered to"
                           f" {outbox.label} ({counts.delivered} delivered, {counts.failed}"
                           f" failed, {counts.dropped} dropped, {counts.abandoned} unsent at the"
                           " end); is the receiver running?")
                log.warning("%s", summary)
                print(f"warning: {summary}", file=sys.stderr)

    @property
    def counts(self) -> Counts:
        """Messages by fate, summed over the URLs."""
        from hankweave_sink_webhook.outbox import Counts

        total = Counts()
        for outbox in self._outboxes:
            total = total + outbox.counts
        return total

    @property
    def execution(self) -> Path | None:
        """The execution directory, once known (:meth:`bind`, or the run's start)."""
        return self._composer.execution


__all__ = ["DEFAULT_EVENTS", "WebhookSink"]
