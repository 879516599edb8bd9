"""Error classification, Retry-After hints, the failure policy and retry delays."""

from __future__ import annotations

import pytest

from hankweave.runtime.failures import (
    classify_api_error_text,
    compute_retry_delay_ms,
    parse_retry_after_ms,
    resolve_failure_action,
    synthesize_missing_failure_reason,
)
from hankweave.state.types import FailureReason

# ----- classification: one case per row of the table, in table order -----


@pytest.mark.parametrize(
    ("text", "kind", "retriable", "prefix"),
    [
        ("Rate limit reached for requests", "rate-limit", True, "API rate limit: "),
        ("rate_limit_error: quota window", "rate-limit", True, "API rate limit: "),
        ("Your credit balance is too low", "api-error", False, "API billing/usage error: "),
        ("Monthly usage limit reached", "api-error", False, "API billing/usage error: "),
        ("UsageLimitError", "api-error", False, "API billing/usage error: "),
        ("insufficient_quota (429)", "api-error", False, "API billing/usage error: "),
        (
            "AccessDeniedException: not allowed",
            "api-error",
            False,
            "Bedrock auth/access error: ",
        ),
        (
            "SignatureDoesNotMatch\nx-stainless-timeout:600",
            "api-error",
            False,
            "Bedrock auth/access error: ",
        ),
        ("Request timed out.", "timeout", True, ""),
        ("Request timed out after 400 seconds", "timeout", True, ""),
        ("401 Unauthorized", "api-error", False, "API auth error: "),
        ("Invalid API key provided", "api-error", False, "API auth error: "),
        # The Claude Code CLI without credentials, after its session began (issue 36).
        ("Not logged in · Please run /login", "api-error", False, "API auth error: "),
        ("prompt is too long: 210000 tokens", "api-error", False, "API invalid request: "),
        ("HTTP 400 bad request", "api-error", False, "API invalid request: "),
        ("ValidationException: bad tool", "api-error", False, "API invalid request: "),
        ("429 Too Many Requests", "rate-limit", True, "API rate limit: "),
        ("read ECONNRESET", "api-error", True, "API transport error: "),
        ("stream was terminated", "api-error", True, "API transport error: "),
        ("529 overloaded_error", "api-error", True, "API server error: "),
        ("Internal Server Error", "api-error", True, "API server error: "),
        ("something odd happened", "api-error", True, "API error in result: "),
    ],
)
def test_classification_table_row(text: str, kind: str, retriable: bool, prefix: str) -> None:
    reason = classify_api_error_text(text)

    assert (reason.type, reason.retriable) == (kind, retriable)
    assert reason.message is not None and reason.message.startswith(prefix + text)


@pytest.mark.parametrize(
    "text",
    [
        "AccessDenied: User is not authorized to perform: sts:AssumeRole",
        "UnrecognizedClientException",
        "The security token included in the request is invalid",
        "InvalidSignatureException",
        "The request signature we calculated does not match",
        "ExpiredTokenException: token expired",
        "The SSO session associated with this profile has expired",
        "Could not load credentials from any providers",
        "Unable to locate credentials",
        "Provider is not configured: amazon-bedrock",
        "Invocation with on-demand throughput isn't supported",
        "ResourceNotFoundException: model",
        "Validation error: The provided model identifier is invalid",
    ],
)
def test_bedrock_permanent_patterns_carry_a_remedy(text: str) -> None:
    reason = classify_api_error_text(text)

    assert reason.retriable is False
    assert reason.message is not None
    assert reason.message.startswith(f"Bedrock auth/access error: {text} — ")


def test_unknown_text_without_a_session_is_a_local_setup_error() -> None:
    reason = classify_api_error_text("spawn ENOENT", session_established=False)

    assert reason == FailureReason(
        type="api-error",
        retriable=False,
        message="Local setup/process error (no session established): spawn ENOENT",
    )


def test_transport_errors_stay_retriable_without_a_session() -> None:
    assert classify_api_error_text("fetch failed", session_established=False).retriable


def test_empty_text_is_an_unknown_api_error() -> None:
    assert classify_api_error_text("").message == "API error in result: Unknown API error"


def test_status_codes_match_on_word_boundaries_only() -> None:
    assert classify_api_error_text("processed 24000 items").message == (
        "API error in result: processed 24000 items"
    )


def test_worded_rate_limit_wins_over_billing_words() -> None:
    assert classify_api_error_text("rate limit exceeded for quota").type == "rate-limit"


def test_retry_after_is_attached_to_retriable_verdicts() -> None:
    assert classify_api_error_text("429 Too Many Requests\nretry-after: 7").retry_after_ms == 7000


def test_retry_after_is_not_attached_to_permanent_verdicts() -> None:
    assert classify_api_error_text("insufficient credit, retry after 30s").retry_after_ms is None


# ----- Retry-After parsing -----


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("retry-after-ms: 1500", 1500),
        ('{"retryAfterMs": 250}', 250),
        ("Retry-After: 500ms", 500),
        ("retry after 2.5 msecs", 2),
        ("retry-after: 30s", 30_000),
        ("retry after 1.5 seconds", 1500),
        ("retry-after: 2 min", 120_000),
        ("retry after 1 minute", 60_000),
        ("Retry-After: 30", 30_000),
        ('{"retry_after": 12, "code": 429}', 12_000),
        ("please try again in 2 minutes", 120_000),
        ("wait 750ms before retrying", 750),
        ("retry in 20s", 20_000),
        ("retry-after: 30.5", 30_500),
        ("retry-after: 2 min 30", 120_000),
    ],
    ids=[
        "key-ms",
        "camel-key-ms",
        "value-ms",
        "value-msecs-decimal",
        "value-s",
        "value-seconds-decimal",
        "value-min",
        "value-minute",
        "bare-header",
        "bare-json",
        "worded-minutes",
        "worded-ms",
        "worded-s",
        "bare-decimal-whole-number-captured",
        "unit-form-wins-over-bare",
    ],
)
def test_retry_after_pattern(text: str, expected: int) -> None:
    assert parse_retry_after_ms(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "retry-after: 2 hours",
        "retry-after: 1,000",
        "retry-after: 07:30",
        "retry-after: 2026-07-30",
        "retry-after: 30h",
        "no hint here",
        "",
    ],
    ids=[
        "unknown-unit",
        "thousands",
        "clock",
        "date",
        "no-backtracking-into-30h",
        "none",
        "empty",
    ],
)
def test_retry_after_gives_no_hint(text: str) -> None:
    assert parse_retry_after_ms(text) is None


def test_retry_after_above_one_hour_is_ignored() -> None:
    assert parse_retry_after_ms("retry-after: 3601") is None
    assert parse_retry_after_ms("retry-after: 3600") == 3_600_000


def test_retry_after_zero_means_now() -> None:
    assert parse_retry_after_ms("retry-after: 0") == 0


def test_bare_retry_after_accepts_a_following_header_line() -> None:
    assert parse_retry_after_ms("retry-after: 5\nx-request-id: abc") == 5000


# ----- failure policy -----

RETRIABLE = FailureReason(type="api-error", retriable=True, message="flaky")
PERMANENT = FailureReason(type="api-error", retriable=False, message="bad key")


@pytest.mark.parametrize(
    ("on_failure", "reason", "attempts", "headless", "action"),
    [
        ("abort", RETRIABLE, 0, False, "stay-active"),
        ("abort", RETRIABLE, 0, True, "shutdown"),
        (None, RETRIABLE, 0, False, "stay-active"),
        ("abort", PERMANENT, 0, False, "shutdown"),
        ("retry", PERMANENT, 0, False, "shutdown"),
        ("retry", RETRIABLE, 2, True, "retry"),
        ("retry", RETRIABLE, 3, False, "shutdown"),
        ("retry", None, 0, False, "shutdown"),
        ("ignore", PERMANENT, 0, True, "continue"),
        ("ignore", RETRIABLE, 9, False, "continue"),
    ],
    ids=[
        "abort-retriable-tui",
        "abort-retriable-headless",
        "unset-is-abort",
        "abort-permanent",
        "retry-permanent-falls-back",
        "retry-retriable-attempts-left",
        "retry-exhausted",
        "retry-without-reason",
        "ignore-permanent",
        "ignore-retriable",
    ],
)
def test_failure_action(
    on_failure: str | None,
    reason: FailureReason | None,
    attempts: int,
    headless: bool,
    action: str,
) -> None:
    assert (
        resolve_failure_action(on_failure, reason, attempts, 3, headless=headless)  # type: ignore[arg-type]
        == action
    )


# ----- retry delays -----


def test_default_retry_delays_are_one_two_four_seconds() -> None:
    assert [compute_retry_delay_ms(1000, attempts) for attempts in range(3)] == [1000, 2000, 4000]


def test_retry_delay_is_clamped_to_the_maximum() -> None:
    assert compute_retry_delay_ms(1000, 10, None, 60_000) == 60_000
    assert compute_retry_delay_ms(1000, 10_000, None, 60_000) == 60_000


def test_retry_after_wins_over_backoff() -> None:
    assert compute_retry_delay_ms(1000, 2, 250, 60_000) == 250


def test_retry_after_is_clamped_to_the_maximum() -> None:
    assert compute_retry_delay_ms(1000, 0, 3_600_000, 60_000) == 60_000


def test_retry_after_zero_retries_at_once() -> None:
    assert compute_retry_delay_ms(1000, 1, 0, 60_000) == 0


# ----- missing reasons -----


def test_missing_reason_after_a_session_is_retriable() -> None:
    assert synthesize_missing_failure_reason(1, True) == FailureReason(
        type="api-error",
        retriable=True,
        message="Codon process exited without a result message (exit code 1)",
    )


def test_missing_reason_without_a_session_is_permanent() -> None:
    reason = synthesize_missing_failure_reason(127, False)

    assert reason is not None and not reason.retriable
    assert reason.message == "Codon process exited before establishing a session (exit code 127)"


def test_no_reason_is_made_up_for_force_stops_or_context_overflow() -> None:
    assert synthesize_missing_failure_reason(1, force_stopping=True) is None
    assert synthesize_missing_failure_reason(0, context_exceeded=True) is None
