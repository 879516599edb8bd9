"""Why a codon failed, whether trying again can help, and what the runtime does next.

* :func:`classify_api_error_text` turns an agent's error text into a
  :class:`~hankweave.state.types.FailureReason` with a retriability verdict (docs/behaviour.md §3.8). It is the
  single place where "transient" and "permanent" are decided.
* :func:`parse_retry_after_ms` reads a provider's Retry-After hint out of that text.
* :func:`resolve_failure_action` is the failure policy (docs/behaviour.md §3.7): pure, so a decision the
  caller abandons (shutdown during the wait) never consumes an attempt.
* :func:`compute_retry_delay_ms` is the wait before a retry.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from hankweave.state.reducer import CRASH_REASON
from hankweave.state.types import FailureReason, HankweaveState, is_terminal_status

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_RETRY_DELAY_MS",
    "MAX_RETRY_AFTER_MS",
    "MAX_RETRY_DELAY_MS",
    "FailureAction",
    "classify_api_error_text",
    "compute_retry_delay_ms",
    "parse_retry_after_ms",
    "resolve_failure_action",
    "synthesize_missing_failure_reason",
]

FailureAction = Literal["retry", "shutdown", "continue", "stay-active"]

DEFAULT_MAX_ATTEMPTS = 3
"""``retryConfig.maxAttempts`` when unset."""
DEFAULT_RETRY_DELAY_MS = 1000
"""``retryConfig.delayMs`` when unset: the first retry waits 1 s, then 2 s, 4 s, ..."""
MAX_RETRY_DELAY_MS = 60_000
"""``retryConfig.maxDelayMs`` when unset: no single wait is longer, Retry-After included."""
MAX_RETRY_AFTER_MS = 3_600_000
"""A Retry-After above one hour is no hint at all: the run will not wait that long anyway, and
clamping it would misreport the provider's answer as "wait a minute"."""

UNKNOWN_API_ERROR = "Unknown API error"

# --------------------------------------------------------------------------------------------
# Retry-After hints
# --------------------------------------------------------------------------------------------

_NUMBER = r"(\d+(?:\.\d+)?)"
_KEY = r"retry[-_ ]?after"
_MS_UNIT = r"(?:ms|msecs?|milliseconds?)\b"
_S_UNIT = r"(?:s|sec|secs|seconds?)\b"
_MIN_UNIT = r"(?:m|min|mins|minutes?)\b"
_WORDED = r"(?:retry|try again|wait)(?:\s+\w+){0,3}?\s+"

# Most specific first: a unit-bearing match ("retry after 500ms") must win over the bare header
# form, which would read the same digits as 500 seconds.
_RETRY_AFTER_PATTERNS: tuple[tuple[re.Pattern[str], int], ...] = tuple(
    (re.compile(pattern, re.ASCII), unit_ms)
    for pattern, unit_ms in (
        # 1. The unit lives in the key (`retry-after-ms: 30000`, `retryAfterMs: 30000`).
        (_KEY + r"[-_ ]?ms[\"'\s:]*" + _NUMBER + r"(?![.\d]|[,:/-]\d)", 1),
        # 2-4. Header or JSON key with a unit on the value.
        (_KEY + r"[\"'\s:]*" + _NUMBER + r"\s*" + _MS_UNIT, 1),
        (_KEY + r"[\"'\s:]*" + _NUMBER + r"\s*" + _S_UNIT, 1000),
        (_KEY + r"[\"'\s:]*" + _NUMBER + r"\s*" + _MIN_UNIT, 60_000),
        # 5. A bare value is delay-seconds (RFC 9110), but only as a whole number that does not
        # continue into a larger token ("1,000", "07:30", "2026-07-30") and is not followed by a
        # word on the same line (an unknown unit such as "2 hours" must give no hint).
        (_KEY + r"[\"'\s:]+" + _NUMBER + r"(?![.\d]|[,:/-]\d)(?![ \t]*[a-z])", 1000),
        # 6. Worded forms: "retry in 30s", "try again in 2 minutes", "wait 500ms".
        (_WORDED + _NUMBER + r"\s*" + _MS_UNIT, 1),
        (_WORDED + _NUMBER + r"\s*" + _S_UNIT, 1000),
        (_WORDED + _NUMBER + r"\s*" + _MIN_UNIT, 60_000),
    )
)


def parse_retry_after_ms(text: str) -> int | None:
    """The wait a provider asked for in ``text``, in milliseconds, or ``None``.

    Recognised (case-insensitive): ``retry-after-ms: N`` / ``retryAfterMs: N``; ``retry-after:
    N ms|s|min`` (with the usual spellings of each unit); a bare ``retry-after: N`` or
    ``"retry_after": N`` in seconds; and worded forms such as ``try again in 2 minutes``.
    Decimals are allowed, ``0`` means "now", and anything above one hour is ignored. HTTP-date
    values are not parsed: a misread date is worse than the normal backoff.
    """
    if not text:
        return None
    lower = text.lower()
    for pattern, unit_ms in _RETRY_AFTER_PATTERNS:
        match = pattern.search(lower)
        if match is None:
            continue
        ms = round(float(match.group(1)) * unit_ms)
        return None if ms > MAX_RETRY_AFTER_MS else ms
    return None


# --------------------------------------------------------------------------------------------
# Classification
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _PermanentPattern:
    matches: Callable[[str], bool]
    remedy: str


# AWS Bedrock failures only the operator can fix. They carry no HTTP status in the surfaced text,
# so without these they would fall through to the retriable fallback. They are checked before
# the timeout branch because a signature error dumps the canonical request, whose headers
# (`x-stainless-timeout: 600`) would otherwise read as a timeout.
_BEDROCK_PERMANENT: tuple[_PermanentPattern, ...] = (
    _PermanentPattern(
        lambda t: "sts:assumerole" in t and ("accessdenied" in t or "not authorized" in t),
        "The configured AWS role cannot be assumed: check the profile's role_arn, the role's "
        "trust policy and any external_id or MFA requirement.",
    ),
    _PermanentPattern(
        lambda t: "accessdeniedexception" in t,
        "These AWS credentials may not invoke this model in this region: check IAM policies "
        "and SCPs (cross-region inference profiles need invoke rights on the profile and its "
        "foundation models), and complete the Anthropic use-case form or first Marketplace "
        "invoke if this is the account's first use of the model.",
    ),
    _PermanentPattern(
        lambda t: (
            "unrecognizedclientexception" in t
            or "security token included in the request is invalid" in t
        ),
        "The AWS credentials are invalid: check AWS_BEARER_TOKEN_BEDROCK or AWS_ACCESS_KEY_ID "
        "and AWS_SECRET_ACCESS_KEY (short-term Bedrock API keys expire).",
    ),
    _PermanentPattern(
        lambda t: (
            "invalidsignatureexception" in t
            or "signaturedoesnotmatch" in t
            or "signature we calculated does not match" in t
        ),
        "Request signing failed: AWS_SECRET_ACCESS_KEY does not belong to AWS_ACCESS_KEY_ID, "
        "or the system clock is badly off.",
    ),
    _PermanentPattern(
        lambda t: "expiredtokenexception" in t,
        "The AWS session credentials expired: run `aws sso login` again or refresh them.",
    ),
    _PermanentPattern(
        lambda t: "sso session" in t and ("not found" in t or "invalid" in t or "expired" in t),
        "The AWS SSO session for this profile is missing or expired: run "
        "`aws sso login --profile <profile>`.",
    ),
    _PermanentPattern(
        lambda t: "could not load credentials" in t or "unable to locate credentials" in t,
        "No AWS credentials were found: set AWS_BEARER_TOKEN_BEDROCK, AWS_PROFILE (after "
        "`aws sso login`) or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, and AWS_REGION.",
    ),
    _PermanentPattern(
        lambda t: "provider is not configured: amazon-bedrock" in t,
        "No AWS credentials are visible to the agent: set AWS_BEARER_TOKEN_BEDROCK, AWS_PROFILE "
        "or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, and AWS_REGION.",
    ),
    _PermanentPattern(
        lambda t: re.search(r"on-demand throughput isn.t supported", t) is not None,
        "This model needs an inference profile on Bedrock: prefix the model id with the "
        "region group's profile prefix (us., eu., jp., au., us-gov.) or use a global. profile.",
    ),
    _PermanentPattern(
        lambda t: (
            "resourcenotfoundexception" in t or "the provided model identifier is invalid" in t
        ),
        "The model is not served in this region: set AWS_REGION to one that serves it, or use "
        "the global. inference profile id.",
    ),
)

_BILLING_WORDS = (
    "credit",
    "billing",
    "insufficient",
    "quota",
    "available balance",
    "out of budget",
)
# "not logged in" / "/login": the Claude Code CLI without credentials answers "Not logged in ·
# Please run /login" (as a result, after a session began); no retry can log it in.
_AUTH_WORDS = ("authentication", "unauthorized", "forbidden", "api key", "oauth",
               "not logged in", "/login")
_INVALID_REQUEST_WORDS = (
    "invalid_request",
    "invalid request",
    "validationexception",
    "validation error:",
    "prompt is too long",
)
_TRANSPORT_WORDS = (
    "socket",
    "econnreset",
    "econnrefused",
    "econnaborted",
    "epipe",
    "etimedout",
    "enotfound",
    "eai_again",
    "unable to connect",
    "fetch failed",
    "connection reset",
    "connection closed",
    "connection error",
    "network",
)
_SERVER_WORDS = ("overloaded", "internal server error", "bad gateway", "service unavailable")


def _has_code(lower: str, code: str) -> bool:
    # Word boundaries, so "after 2400s" is not a 400 (ASCII, as in JavaScript).
    return re.search(rf"\b{code}\b", lower, re.ASCII) is not None


def classify_api_error_text(text: str, *, session_established: bool = True) -> FailureReason:
    """Classify an agent's error text; the first matching rule wins (docs/behaviour.md §3.8).

    Permanent (not retriable): billing/usage, AWS Bedrock auth/access, auth (401/403, a missing
    or refused key, the Claude CLI's "Not logged in"), invalid requests (400, "prompt is too long"). Transient (retriable): rate limits (worded, or a
    bare 429 after the billing check, since a 429 may be an exhausted quota), timeouts, transport
    faults, server errors (5xx, overloaded). Unrecognised text is retriable, unless no session was
    ever established: then it is a local setup problem that retrying cannot fix.

    Retriable verdicts carry ``retry_after_ms`` when the text holds a hint.
    """
    error_text = text if text else UNKNOWN_API_ERROR
    lower = error_text.lower()
    retry_after = parse_retry_after_ms(error_text)

    def transient(
        kind: Literal["rate-limit", "timeout", "api-error"], message: str
    ) -> FailureReason:
        return FailureReason(type=kind, retriable=True, message=message, retry_after_ms=retry_after)

    def permanent(message: str) -> FailureReason:
        return FailureReason(type="api-error", retriable=False, message=message)

    # A worded rate limit wins over the billing words: a rate_limit_error that mentions "quota"
    # is transient.
    if "rate limit" in lower or "rate_limit" in lower or "rate-limit" in lower:
        return transient("rate-limit", f"API rate limit: {error_text}")
    if any(word in lower for word in _BILLING_WORDS) or re.search(r"usage\s?limit", lower):
        return permanent(f"API billing/usage error: {error_text}")
    for pattern in _BEDROCK_PERMANENT:
        if pattern.matches(lower):
            return permanent(f"Bedrock auth/access error: {error_text} — {pattern.remedy}")
    # Before the status codes: "timed out after 400 seconds" is a timeout, not a bad request.
    if "timeout" in lower or "timed out" in lower:
        return transient("timeout", error_text)
    if _has_code(lower, "401") or _has_code(lower, "403") or any(w in lower for w in _AUTH_WORDS):
        return permanent(f"API auth error: {error_text}")
    if any(word in lower for word in _INVALID_REQUEST_WORDS) or _has_code(lower, "400"):
        return permanent(f"API invalid request: {error_text}")
    if _has_code(lower, "429"):
        return transient("rate-limit", f"API rate limit: {error_text}")
    # Matched explicitly so they stay retriable when no session was established: a network
    # outage at codon start is not a local setup failure.
    if any(word in lower for word in _TRANSPORT_WORDS) or (
        "stream" in lower and "terminated" in lower
    ):
        return transient("api-error", f"API transport error: {error_text}")
    if any(_has_code(lower, code) for code in ("500", "502", "503", "504", "529")) or any(
        word in lower for word in _SERVER_WORDS
    ):
        return transient("api-error", f"API server error: {error_text}")
    if not session_established:
        return permanent(f"Local setup/process error (no session established): {error_text}")
    # Unknown text is retriable: a wrong "retriable" costs one attempt, a wrong "permanent"
    # kills the run.
    return transient("api-error", f"API error in result: {error_text}")


def turn_limit_failure(turns: float | None, harness: str) -> FailureReason:
    """A pass that ended at the turn limit.  Not retried: the same prompt would end there again."""
    after = f" after {int(turns)} turns" if turns else ""
    return FailureReason(
        type="turn-limit", retriable=False,
        message=f"The agent reached its turn limit{after}: give the codon less to do, or raise"
                f" harnesses.{harness}.maxTurns in hankweave.json")


def synthesize_missing_failure_reason(
    exit_code: int,
    session_established: bool = True,
    *,
    force_stopping: bool = False,
    context_exceeded: bool = False,
) -> FailureReason | None:
    """The reason of a failed codon that left no classified reason of its own.

    ``None`` when another mechanism owns the failure: a force-stop (retrying would fight the
    user) or a context overflow (the loop's termination logic decides). Otherwise an
    ``api-error``, retriable when a session had been established.
    """
    if force_stopping or context_exceeded:
        return None
    if session_established:
        message = f"Codon process exited without a result message (exit code {exit_code})"
    else:
        message = f"Codon process exited before establishing a session (exit code {exit_code})"
    return FailureReason(type="api-error", retriable=session_established, message=message)


# --------------------------------------------------------------------------------------------
# Policy
# --------------------------------------------------------------------------------------------


def resolve_failure_action(
    on_failure: Literal["abort", "retry", "ignore"] | None,
    reason: FailureReason | None,
    attempts: int,
    max_attempts: int,
    *,
    headless: bool,
) -> FailureAction:
    """What to do after a failed codon (docs/behaviour.md §3.7). Pure: the caller records the attempt when it
    actually retries.

    ============  ==========================  =================================================
    onFailure     retriable                   action
    ============  ==========================  =================================================
    abort/unset   yes                         ``stay-active`` (wait for a manual retry); with no
                                              client to retry (headless) ``shutdown``
    abort/unset   no                          ``shutdown``
    retry         no                          ``shutdown`` (falls back to abort)
    retry         yes, attempts < max         ``retry``
    retry         yes, attempts exhausted     ``shutdown``
    ignore        any                         ``continue``
    ============  ==========================  =================================================

    A missing reason counts as not retriable.
    """
    retriable = reason is not None and reason.retriable
    policy = on_failure or "abort"
    if policy == "ignore":
        return "continue"
    if policy == "retry":
        return "retry" if retriable and attempts < max_attempts else "shutdown"
    if retriable and not headless:
        return "stay-active"
    return "shutdown"


INTERRUPTED = "Interrupted: "
"""How the failure reason of an attempt a shutdown stopped begins."""
FORCE_STOPPED = "Force stopped: "
"""How the failure reason of an attempt a client force-stopped begins."""
WAITING_FOR_PERSON = "Waiting for a person to answer "
"""How the failure reason of an attempt that ended for an interruption begins (followed by the
interruptions' ids; docs/human-in-the-loop.md)."""


def failure_kind(reason_type: str | None, message: str | None
                 ) -> Literal["failed", "waiting", "stopped"]:
    """How a failed attempt is shown to a person: ``waiting`` when it ended to wait for a
    person's answer, ``stopped`` when a shutdown, Ctrl-C or a force-stop ended it, else
    ``failed``: only the last is something that went wrong."""
    if reason_type != "unknown":
        return "failed"
    if (message or "").startswith(WAITING_FOR_PERSON):
        return "waiting"
    if (message or "").startswith((INTERRUPTED, FORCE_STOPPED)):
        return "stopped"
    return "failed"


def is_interruption(reason: FailureReason) -> bool:
    """Whether a failure was a stop from outside the codon (a shutdown, a client, a wait for a
    person), which no failure policy acts on: a resumed run repeats that attempt."""
    return failure_kind(reason.type, reason.message) != "failed"


def resumed_attempt(
    state: HankweaveState,
    codon_id: str,
    run_id: str | None,
    *,
    on_failure: Literal["abort", "retry", "ignore"] | None,
    max_attempts: int,
) -> int:
    """The attempt number a codon starts at when it is the first codon of run ``run_id``.

    A run killed (or stopped) partway through a codon's retries left the codon's newest attempt
    as the last record of the newest earlier run that has records.  The resumed run carries on
    from there: after a failure that its policy would retry, with the next attempt; after an
    attempt that never finished (killed) or that a shutdown or a client stopped, with that
    attempt again.  Everything else (retries that ran out, another codon last, a codon that
    already runs in this run) starts a new series at 1.
    """
    runs = [run for run in state.runs if run.codons or run.run_id == run_id]
    if not runs or runs[0].run_id != run_id or runs[0].codons or len(runs) < 2:
        return 1
    last = runs[1].codons[-1]
    if last.codon_id != codon_id:
        return 1
    number = last.attempt or 1
    reason: FailureReason | None = getattr(last, "failure_reason", None)
    stopped_from_outside = reason is not None and (reason == CRASH_REASON
                                                   or is_interruption(reason))
    if not is_terminal_status(last.status) or stopped_from_outside:
        return number
    if last.status == "failed" and resolve_failure_action(
            on_failure, reason, number - 1, max_attempts, headless=True) == "retry":
        return number + 1
    return 1


def compute_retry_delay_ms(
    base: float = DEFAULT_RETRY_DELAY_MS,
    attempts: int = 0,
    retry_after_ms: float | None = None,
    max_ms: float = MAX_RETRY_DELAY_MS,
) -> int:
    """The wait before the next retry, in milliseconds.

    A provider's Retry-After wins (it knows the limit window; backoff is a guess); otherwise
    ``base * 2**attempts`` (``attempts`` = retries already made). Both are clamped to
    ``[0, max_ms]``. No jitter: codons run one at a time, and a fixed delay keeps retries
    reproducible.
    """
    if retry_after_ms is not None:
        return round(max(0.0, min(float(retry_after_ms), float(max_ms))))
    # Cap the exponent so a huge attempt count cannot overflow on the way to the clamp.
    backoff = max(0.0, float(base)) * float(2 ** min(max(0, attempts), 30))
    return round(max(0.0, min(backoff, float(max_ms))))
