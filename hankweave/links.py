"""Signed action links: answer an interruption from a message (docs/webhooks.md).

A webhook message about a pause carries links such as "approve", "reject" or "extend by
$2.00".  Each link holds a token: an :class:`ActionClaim` (which execution, which
interruption, what answer, until when) signed with HMAC-SHA256 under a key only this user can
read (:func:`link_key`).  The dashboard checks the signature and the expiry before it answers,
and the answer itself is single-use: an interruption is answered once, so a link used again (or
another link of the same message) is refused.

The token goes in the URL's fragment (``/act#TOKEN``): browsers never send a fragment to a
server, so it reaches neither the dashboard's access log nor a proxy's, and a chat app that
fetches the link to preview it sees only the confirmation page.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import secrets
import shlex
import stat
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hankweave.state.interruptions import APPROVE, EXTEND, REJECT, GivenAnswer
from hankweave.state.types import Interruption

LinkAction = Literal["approve", "reject", "extend"]
LINK_KEY_ENV = "HANKWEAVE_LINK_KEY_FILE"
"""Where the signing key is (default ``$XDG_CONFIG_HOME/hankweave/link-key``)."""
LINK_ANSWERED_BY = "webhook-link"
"""``answeredBy`` of an answer given through a link."""
DEFAULT_TTL_S = 24 * 3600.0
_CONTEXT = b"hankweave-action-link.v1."
"""Signed before the claim, so a key used for something else can never sign a link."""


LinkProblem = Literal["malformed", "forged", "expired", "key"]


class LinkError(ValueError):
    """A link that is malformed, forged or expired (or a key that cannot be used): the message
    says it in words, :attr:`reason` in one word."""

    def __init__(self, message: str, reason: LinkProblem) -> None:
        super().__init__(message)
        self.reason: LinkProblem = reason


class ActionClaim(BaseModel):
    """What a link's token says: answer ``interruption`` of ``execution`` with ``action``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    execution: str
    """The execution directory, absolute."""
    interruption: str
    action: LinkAction
    amount: float | None = Field(default=None, gt=0)
    """An ``extend`` link's amount, in the ceiling's unit."""
    currency: Literal["cost", "duration", "outputTokens", "contextTokens"] | None = None
    """An ``extend`` link's unit (the ceiling's currency), for its label."""
    expires: int
    """Epoch seconds after which the link is refused."""
    nonce: str = Field(default_factory=lambda: secrets.token_urlsafe(9))

    def given(self) -> GivenAnswer:
        """The answer this link gives."""
        if self.action == "extend":
            return GivenAnswer(extend=repr(self.amount))
        return GivenAnswer(approve=self.action == APPROVE, reject=self.action == REJECT)

    @property
    def label(self) -> str:
        """How a message names the link: ``approve``, ``reject``, ``extend by $1.00``."""
        if self.action != EXTEND or self.amount is None:
            return self.action
        from hankweave.runtime.budget import describe_amount

        return f"extend by {describe_amount(self.currency or 'cost', self.amount)}"


# ----- the key -----


def link_key_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if env.get(LINK_KEY_ENV):
        return Path(env[LINK_KEY_ENV])
    config = Path(env.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return config / "hankweave" / "link-key"


def link_key(path: Path | None = None) -> bytes:
    """The signing key, made (32 random bytes, mode 0600) the first time it is needed.

    Raises:
        LinkError: (reason ``key``) the file is not a key, or others could read or replace it
            (a symlink, not this user's, readable by the group or others): a key anyone else
            can read signs links anyone can forge, so it is refused, not used.
    """
    path = path or link_key_path()
    if os.path.lexists(path):  # a dangling symlink too: refused, never written through
        return _read_key(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secrets.token_hex(32) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    try:
        os.link(temporary, path)  # never replaces a key another process made meanwhile
    except FileExistsError:
        pass
    finally:
        temporary.unlink(missing_ok=True)
    return _read_key(path)


def _read_key(path: Path) -> bytes:
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise LinkError(f"{path}: the link key cannot be read ({exc.strerror or exc}; a"
                        " symlink is refused)", "key") from None
    with os.fdopen(descriptor, "rb") as handle:
        found = os.fstat(handle.fileno())
        if not stat.S_ISREG(found.st_mode):
            raise LinkError(f"{path}: the link key is not a file", "key")
        if found.st_uid != os.getuid() or found.st_mode & 0o077:
            raise LinkError(f"{path}: the link key must be yours and readable only by you"
                            f" (chmod 600 {shlex.quote(str(path))}): others could forge links"
                            " with it", "key")
        data = handle.read(4096)
    try:
        key = bytes.fromhex(data.decode("ascii").strip())
    except ValueError:  # UnicodeDecodeError included
        raise LinkError(f"{path}: not a link key (64 hex digits)", "key") from None
    if len(key) < 16:
        raise LinkError(f"{path}: the link key is too short (at least 32 hex digits)", "key")
    return key


# ----- tokens -----


def sign_link(claim: ActionClaim, key: bytes) -> str:
    """The token of ``claim``: its JSON and its signature, both base64url."""
    body = _b64(json.dumps(claim.model_dump(exclude_none=True), separators=(",", ":"),
                           sort_keys=True).encode())
    return f"{body}.{_b64(_mac(key, body))}"


def verify_link(token: str, key: bytes, *, now: float | None = None) -> ActionClaim:
    """The claim of ``token`` if ``key`` signed it and it has not expired; :class:`LinkError`
    otherwise (nothing about the claim is trusted before the signature is checked)."""
    body, dot, signature = token.strip().partition(".")
    incomplete = "this link is incomplete: copy the whole link from the message"
    if not dot or not body or not signature or not token.isascii():
        raise LinkError(incomplete, "malformed")
    try:
        given = _unb64(signature)
    except (binascii.Error, ValueError):
        raise LinkError(incomplete, "malformed") from None
    if _b64(given) != signature:  # one spelling per signature: unused bits must be zero
        raise LinkError(incomplete, "malformed")
    if not hmac.compare_digest(given, _mac(key, body)):
        raise LinkError("this link's signature does not verify: it was changed, or signed with"
                        " another key", "forged")
    try:
        claim = ActionClaim.model_validate_json(_unb64(body))
    except (binascii.Error, ValueError, ValidationError):
        raise LinkError("this link's content cannot be read", "malformed") from None
    if (time.time() if now is None else now) >= claim.expires:
        raise LinkError(f"this link expired at {_when(claim.expires)}: answer on the dashboard"
                        " or with `hankweave answer`", "expired")
    return claim


def act_url(base_url: str, token: str) -> str:
    """The page that confirms and performs a link's action (the token in the fragment)."""
    return f"{base_url.rstrip('/')}/act#{token}"


def link_claims(item: Interruption, execution: Path, *, ttl_s: float = DEFAULT_TTL_S,
                now: float | None = None) -> list[ActionClaim]:
    """The links a message about ``item`` offers: approve and reject for an approval, two
    extensions (half the ceiling and the whole ceiling again) and reject for a budget ask,
    none for a question (it needs words: the dashboard takes them)."""
    expires = int((time.time() if now is None else now) + ttl_s)

    currency = item.budget.currency if item.budget is not None else None

    def offer(action: LinkAction, amount: float | None = None) -> ActionClaim:
        return ActionClaim(execution=str(execution), interruption=item.id, action=action,
                           amount=amount, currency=currency if amount else None,
                           expires=expires)

    if item.kind == "budget" and item.budget is not None:
        return [*(offer("extend", amount) for amount in suggested_extensions(
                    item.budget.currency, item.budget.limit)), offer("reject")]
    if item.kind in ("approval", "tool-approval"):
        return [offer("approve"), offer("reject")]
    return []


def suggested_extensions(currency: str, limit: float) -> list[float]:
    """Half the ceiling and the ceiling again, rounded to what a person would type."""
    amounts: list[float] = []
    for fraction in (0.5, 1.0):
        raw = limit * fraction
        if currency == "cost":  # cents, or two significant digits below a cent
            amount = round(raw, 2) if raw >= 0.01 else float(f"{raw:.2g}")
        elif currency == "duration":
            amount = float(max(1, round(raw)))
        else:
            amount = float(max(1, round(raw)))
        if amount not in amounts:
            amounts.append(amount)
    return amounts


def _mac(key: bytes, body: str) -> bytes:
    return hmac.new(key, _CONTEXT + body.encode("ascii"), hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    if not text.isascii():
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _when(epoch: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))


__all__ = ["LINK_ANSWERED_BY", "ActionClaim", "LinkAction", "LinkError", "LinkProblem", "act_url", "link_claims",
           "link_key", "link_key_path", "sign_link", "suggested_extensions", "verify_link"]
