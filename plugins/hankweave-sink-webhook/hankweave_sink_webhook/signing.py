"""Signing a message and checking a signature: the two sides of one HMAC.

Each request carries ``X-Hankweave-Timestamp: <unix seconds>`` and ``X-Hankweave-Signature:
sha256=<hex>``, the HMAC-SHA256 under the shared secret of ``f"{timestamp}.".encode() + body``
(the raw body bytes, as sent).  The timestamp is signed with the body, so a receiver that
refuses old timestamps (:func:`verify_signature` does, after five minutes) cannot be fed a
recorded request again later; within that window ``X-Hankweave-Delivery`` (the event's id,
the same on every retry) lets it drop a repeat.
"""

from __future__ import annotations

import hashlib
import hmac
import time

TIMESTAMP_HEADER = "X-Hankweave-Timestamp"
SIGNATURE_HEADER = "X-Hankweave-Signature"
EVENT_HEADER = "X-Hankweave-Event"
DELIVERY_HEADER = "X-Hankweave-Delivery"
SCHEME = "sha256="
DEFAULT_TOLERANCE_S = 300.0


def _key(secret: str | bytes) -> bytes:
    return secret.encode("utf-8") if isinstance(secret, str) else secret


def sign_body(secret: str | bytes, timestamp: int | str, body: bytes) -> str:
    """The ``X-Hankweave-Signature`` value of ``body`` sent at ``timestamp``."""
    mac = hmac.new(_key(secret), f"{timestamp}.".encode("ascii") + body, hashlib.sha256)
    return SCHEME + mac.hexdigest()


def verify_signature(secret: str | bytes, timestamp: str | int | None, body: bytes,
                     signature: str | None, *, tolerance_s: float = DEFAULT_TOLERANCE_S,
                     now: float | None = None) -> bool:
    """Whether ``body`` was signed with ``secret`` at ``timestamp``, no more than
    ``tolerance_s`` seconds from ``now`` (default: the clock) either way.

    ``timestamp`` and ``signature`` are the ``X-Hankweave-Timestamp`` and
    ``X-Hankweave-Signature`` header values as received (``None`` when absent: ``False``);
    ``body`` the raw request body, before any JSON decoding.  The comparison takes the same
    time whatever the signature's bytes.
    """
    if timestamp is None or signature is None:
        return False
    stamp = str(timestamp).strip()
    if not stamp.isdigit() or not stamp.isascii() or len(stamp) > 12:
        return False
    if abs((time.time() if now is None else now) - int(stamp)) > tolerance_s:
        return False
    expected = sign_body(secret, stamp, body).encode("ascii")
    return hmac.compare_digest(expected, signature.strip().encode("utf-8", "replace"))


__all__ = ["DELIVERY_HEADER", "EVENT_HEADER", "SIGNATURE_HEADER", "TIMESTAMP_HEADER",
           "sign_body", "verify_signature"]
