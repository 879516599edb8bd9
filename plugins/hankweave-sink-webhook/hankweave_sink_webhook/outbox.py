"""Delivery to one URL, off the sink's worker: a bounded queue and a sender thread of its own.

The policy, documented in docs/webhooks.md ("When the receiver is down"):

* **Order.** One sender per URL posts one message at a time, in the order the events happened;
  a message being retried holds back the ones after it, so a receiver never sees a run end
  before the pause that ended it.
* **Overflow: drop the oldest.** At most ``capacity`` messages wait (``queueSize``); when full,
  the oldest waiting one (not the one being sent) is dropped and counted, and the first drop
  since the queue last had room is logged.  :meth:`Outbox.put` never waits.
* **Retries.** A connection error, a timeout, 429 and 5xx are tried again, up to
  ``max_attempts`` in all, after an exponential backoff with jitter (0.5 s doubling, at most
  30 s) or the receiver's ``Retry-After`` (at most 60 s).  Another 4xx is not: the request itself
  is wrong.  Nor is a 3xx: redirects are not followed (a receiver that moved must be given its
  new URL; a message never goes to another host silently).  Each retry is signed anew (a fresh
  timestamp) with the same body and the same ``X-Hankweave-Delivery``.
* **Shutdown.** :meth:`Outbox.close` lets the sender deliver what is queued until a deadline,
  without waiting out backoffs: a message whose retry was pending gets one attempt at once.
  From then on a receiver that answers 429 or 5xx is tried again while the wait fits before
  the deadline, but one that does not answer (refused, timed out) is down: the message and
  the rest for this URL are given up at once.  What is left at the deadline is abandoned; the
  thread is a daemon, so a request still waiting for an answer never holds the process.

Failures are logged (``hankweave.sink.webhook``) naming the event, the delivery id and the
receiver as ``scheme://host[:port]`` only: a webhook URL's path is often its secret (Slack's
is), and neither the body, its links' tokens nor the signing secret is ever logged.
"""

from __future__ import annotations

import email.utils
import http.client
import logging
import random
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from hankweave_sink_webhook.formats import CONTENT_TYPE
from hankweave_sink_webhook.signing import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    sign_body,
)

log = logging.getLogger("hankweave.sink.webhook")

USER_AGENT = "hankweave-sink-webhook/0.1"
MAX_RETRY_AFTER_S = 60.0
_READ_LIMIT = 64 * 1024
"""A receiver's answer is read this far (and ignored): a huge one never fills memory."""


@dataclass(frozen=True)
class Delivery:
    """One message for one URL: the body is the same on every attempt."""

    event: str
    id: str
    body: bytes


@dataclass(frozen=True)
class Outcome:
    """What one attempt came to."""

    ok: bool
    retry: bool = False
    answered: bool = False
    """The receiver answered (with a status that is not a success)."""
    reason: str = ""
    retry_after: float | None = None


@dataclass(frozen=True)
class Backoff:
    """Seconds to wait before attempt ``n + 1`` after attempt ``n`` failed."""

    base_s: float = 0.5
    cap_s: float = 30.0

    def delay(self, attempt: int) -> float:
        return min(self.cap_s, self.base_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)


@dataclass
class Counts:
    """Messages by fate, for one URL or summed."""

    delivered: int = 0
    failed: int = 0
    """Given up: not retried (a 4xx, a 3xx) or out of attempts."""
    dropped: int = 0
    """Pushed out of a full queue."""
    abandoned: int = 0
    """Still queued or in flight when shutdown ended delivery."""

    def __add__(self, other: Counts) -> Counts:
        return Counts(self.delivered + other.delivered, self.failed + other.failed,
                      self.dropped + other.dropped, self.abandoned + other.abandoned)

    @property
    def lost(self) -> int:
        return self.failed + self.dropped + self.abandoned


Post = Callable[[str, bytes, dict[str, str], float], Outcome]
"""Sends one request: (url, body, headers, timeout in seconds)."""


class Outbox:
    """The queue and sender of one URL (see the module docstring)."""

    def __init__(self, url: str, *, label: str, secret: bytes | None, capacity: int,
                 max_attempts: int, timeout_s: float, backoff: Backoff | None = None,
                 post: Post | None = None) -> None:
        self.url = url
        self.label = label
        self.counts = Counts()
        self._secret = secret
        self._capacity = capacity
        self._max_attempts = max_attempts
        self._timeout_s = timeout_s
        self._backoff = backoff or Backoff()
        self._post = post or post_once
        self._queue: deque[Delivery] = deque()
        self._in_flight: Delivery | None = None
        self._ready = threading.Condition()
        self._closing = False
        self._deadline = float("inf")
        self._abandoned = False
        self._full = False  # a drop was logged since the queue last had room
        self._failing = False  # the last attempt failed: the next failure is not news
        self._down = False  # the last message given up got no answer at all
        self._thread: threading.Thread | None = None

    def put(self, delivery: Delivery) -> None:
        """Queue ``delivery`` without waiting (dropping the oldest waiting one when full)."""
        with self._ready:
            if self._closing:
                return
            if len(self._queue) >= self._capacity:
                dropped = self._queue.popleft()
                self.counts.dropped += 1
                if not self._full:
                    self._full = True
                    log.warning("webhook sink: %s is not keeping up: its queue of %d messages"
                                " is full, dropping the oldest (first: %s, delivery %s)",
                                self.label, self._capacity, dropped.event, dropped.id)
            elif len(self._queue) < self._capacity // 2:
                self._full = False
            self._queue.append(delivery)
            if self._thread is None:
                self._thread = threading.Thread(target=self._send_all, daemon=True,
                                                name=f"hankweave-webhook-{self.label}")
                self._thread.start()
            self._ready.notify_all()

    def close(self, deadline: float) -> None:
        """Start shutting down: deliver what is queued until ``deadline``
        (``time.monotonic()``), without waiting out backoffs."""
        with self._ready:
            self._closing, self._deadline = True, deadline
            self._ready.notify_all()

    def join(self, deadline: float) -> None:
        """Wait for the sender until ``deadline`` (``time.monotonic()``), then abandon what is
        left."""
        thread = self._thread
        if thread is not None:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._ready:
            if thread is None or not thread.is_alive():
                return
            self._abandoned = True
            left = len(self._queue) + (self._in_flight is not None)
            self.counts.abandoned += left
            self._queue.clear()
            self._ready.notify_all()
        if left:
            log.warning("webhook sink: %d message(s) for %s were not delivered before the end"
                        " of the run (still sending or queued)", left, self.label)

    # ----- the sender thread -----

    def _send_all(self) -> None:
        while True:
            with self._ready:
                while not self._queue and not self._closing:
                    self._ready.wait()
                if not self._queue or self._abandoned:
                    return
                delivery = self._in_flight = self._queue.popleft()
            try:
                delivered = self._send(delivery)
            except Exception as exc:  # a bug here must not end the thread silently
                log.error("webhook sink: sending %s (delivery %s) to %s failed: %s",
                          delivery.event, delivery.id, self.label, type(exc).__name__)
                delivered = False
            with self._ready:
                self._in_flight = None
                if self._abandoned:
                    return
                if delivered:
                    self.counts.delivered += 1
                    continue
                self.counts.failed += 1
                if self._closing and self._queue and self._down:
                    left = len(self._queue)
                    self.counts.abandoned += left
                    self._queue.clear()
                    log.warning("webhook sink: %d message(s) for %s were not sent: the run"
                                " ended while its receiver was down", left, self.label)

    def _send(self, delivery: Delivery) -> bool:
        for attempt in range(1, self._max_attempts + 1):
            if self._abandoned:
                return False
            outcome = self._post(self.url, delivery.body, self._headers(delivery),
                                 self._timeout_s)
            if outcome.ok:
                if self._failing:
                    self._failing = False
                    log.info("webhook sink: %s takes messages again", self.label)
                return True
            delay = outcome.retry_after if outcome.retry_after is not None \
                else self._backoff.delay(attempt)
            retry, why = outcome.retry and attempt < self._max_attempts, \
                f"after {attempt} attempts"
            if not outcome.retry:
                why = "not retried"
            elif retry and self._closing:
                # The run is over: a receiver that answers (busy) is worth the wait while it
                # fits before the deadline; one that does not answer is down.
                retry = outcome.answered and time.monotonic() + delay < self._deadline
                why = "the run ended"
            if not retry:
                self._failing, self._down = True, not outcome.answered
                log.warning("webhook sink: gave up sending %s (delivery %s) to %s: %s (%s)",
                            delivery.event, delivery.id, self.label, outcome.reason, why)
                return False
            (log.debug if self._failing else log.warning)(
                "webhook sink: sending %s (delivery %s) to %s failed: %s; trying again in"
                " %.1fs (attempt %d of %d)", delivery.event, delivery.id, self.label,
                outcome.reason, delay, attempt + 1, self._max_attempts)
            self._failing = True
            with self._ready:
                if self._closing:
                    self._ready.wait_for(lambda: self._abandoned, delay)
                else:  # a shutdown ends the wait: one attempt at once
                    self._ready.wait_for(lambda: self._closing, delay)
        return False

    def _headers(self, delivery: Delivery) -> dict[str, str]:
        timestamp = str(int(time.time()))
        headers = {"Content-Type": CONTENT_TYPE, "User-Agent": USER_AGENT,
                   EVENT_HEADER: delivery.event, DELIVERY_HEADER: delivery.id,
                   TIMESTAMP_HEADER: timestamp}
        if self._secret is not None:
            headers[SIGNATURE_HEADER] = sign_body(self._secret, timestamp, delivery.body)
        return headers


# ----- one request -----


class _NoRedirects(urllib.request.HTTPErrorProcessor):
    """Hands back every response as it is: no redirect is followed, no status raises."""

    def http_response(self, request: Any, response: Any) -> Any:
        return response

    https_response = http_response


_OPENER = urllib.request.build_opener(_NoRedirects)
"""urllib's opener (proxies from the environment, as everywhere), without redirects."""


def post_once(url: str, body: bytes, headers: dict[str, str], timeout_s: float) -> Outcome:
    """POST ``body`` to ``url`` once; what came of it, never raising for the network."""
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            status = int(response.status)
            retry_after = response.headers.get("Retry-After")
            response.read(_READ_LIMIT)
    except TimeoutError:
        return Outcome(False, retry=True, reason=f"no answer within {timeout_s:g}s")
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError):
            return Outcome(False, retry=True, reason=f"no answer within {timeout_s:g}s")
        return Outcome(False, retry=True, reason=f"cannot connect: {_describe(reason)}")
    except (http.client.HTTPException, OSError) as exc:
        return Outcome(False, retry=True, reason=_describe(exc))
    if 200 <= status < 300:
        return Outcome(True)
    if 300 <= status < 400:
        return Outcome(False, answered=True, reason=f"HTTP {status}: a redirect, not followed"
                                                    " (give the URL it points to)")
    if status == 429 or status >= 500:
        return Outcome(False, retry=True, answered=True, reason=f"HTTP {status}",
                       retry_after=retry_after_s(retry_after))
    return Outcome(False, answered=True, reason=f"HTTP {status}")


def retry_after_s(value: str | None, *, now: float | None = None) -> float | None:
    """A ``Retry-After`` header's wait in seconds (a number or an HTTP date), at most
    :data:`MAX_RETRY_AFTER_S`; ``None`` when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        seconds = float(value)
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    return max(0.0, min(MAX_RETRY_AFTER_S, seconds))


def _describe(error: object) -> str:
    """An error as a short reason that names no URL."""
    if isinstance(error, OSError) and error.strerror:
        return str(error.strerror)
    if isinstance(error, str):
        return error
    return type(error).__name__


def receiver_label(url: str) -> str:
    """How messages name a receiver: ``scheme://host[:port]``, without user, path or query."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}"


__all__ = ["Backoff", "Counts", "Delivery", "Outbox", "Outcome", "post_once", "receiver_label",
           "retry_after_s"]
