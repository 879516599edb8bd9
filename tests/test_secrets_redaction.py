"""``hankweave.secrets`` redaction: which secrets a :class:`Redactor` finds, and what it leaves."""

from __future__ import annotations

import json

import pytest

from hankweave.secrets import (
    REDACTION_KINDS,
    Redactor,
    is_provider_key_name,
    is_secret_name,
    redact_text,
    redaction_marker,
)

GITHUB = "ghp_" + "a1B2c3D4e5" * 4


@pytest.mark.parametrize(("text", "kind"), [
    ("sk-ant-api03-abcdefgh", "token"),
    ("sk-proj-abcdefghijklmnop1234", "token"),
    ("sk-abcdefghijklmnop1234", "token"),
    (GITHUB, "token"),
    ("gho_" + "x" * 36, "token"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstu", "token"),
    ("AKIAABCDEFGHIJKLMNOP", "token"),
    ("xoxb-1234567890-abcdef", "token"),
    ("xoxp-1234567890-abcdef", "token"),
    ("glpat-abcdefghij0123456789", "token"),
])
def test_token_shapes_are_redacted(text, kind):
    redacted, counts = redact_text(f"the key is {text}, keep it safe")
    assert redacted == f"the key is {redaction_marker(kind)}, keep it safe"
    assert counts == {kind: 1}


@pytest.mark.parametrize("text", [
    "task-abcdefghijklmnopqrstuvwxyz",  # merely contains "sk-"
    "a desk-abcdefghijklmnopqrstuvwxyz",
    "Bearer authentication is used",  # prose: no digit
    "Bearer token",
    "ssh://git@github.com/org/repo.git",  # a user name, not a token
    "mail me at someone@example.com",
    "TOKENIZERS_PARALLELISM=false",
    "API_KEY=$ANTHROPIC_API_KEY and API_KEY=${KEY} and API_KEY=<your key>",
    "export ANTHROPIC_API_KEY=... (a README's placeholder) or ANTHROPIC_API_KEY=…",
    "API_KEY=os.environ[\"X\"] and API_KEY=read_key()",
    '{"costUsd": 0.0123, "done": true, "model": "claude-sonnet-4-5"}',
])
def test_ordinary_text_is_left_alone(text):
    assert redact_text(text) == (text, {})


def test_a_bearer_token_is_redacted_and_the_word_kept():
    assert redact_text("Authorization: Bearer eyJhbGciOi.J9abc123xyz")[0] == \
        "Authorization: Bearer [REDACTED:token]"


def test_url_passwords_are_redacted_and_the_user_and_host_kept():
    text, counts = redact_text("clone https://bob:s3cret@git.example.com/x and"
                               " redis://:hunter2@localhost:6379/0")
    assert text == ("clone https://bob:[REDACTED:url-credentials]@git.example.com/x and"
                    " redis://:[REDACTED:url-credentials]@localhost:6379/0")
    assert counts == {"url-credentials": 2}


def test_a_long_lone_token_in_a_url_is_redacted():
    token = "0123456789abcdef0123456789abcdef"
    assert redact_text(f"https://{token}@github.com/o/r")[0] == \
        "https://[REDACTED:url-credentials]@github.com/o/r"


def test_a_url_in_compact_json_never_eats_into_the_json_around_it():
    line = json.dumps({"url": "https://a.example", "mail": "x@y.org"}, separators=(",", ":"))
    assert redact_text(line) == (line, {})


@pytest.mark.parametrize(("text", "expected", "kind"), [
    ("DB_PASSWORD=x", "DB_PASSWORD=[REDACTED:env]", "env"),
    ("export OPENAI_API_KEY='abc'.", "export OPENAI_API_KEY='[REDACTED:provider-key]'.",
     "provider-key"),
    ('{"GITHUB_TOKEN": "tok"}', '{"GITHUB_TOKEN": "[REDACTED:provider-key]"}', "provider-key"),
    ('"{\\"MY_SECRET\\": \\"abc\\"}"', '"{\\"MY_SECRET\\": \\"[REDACTED:env]\\"}"', "env"),
    ("GET /v1?api_key=abcd1234&q=1", "GET /v1?api_key=[REDACTED:env]&q=1", "env"),
])
def test_a_value_assigned_to_a_secret_name_is_redacted_whatever_its_length(text, expected, kind):
    assert redact_text(text) == (expected, {kind: 1})


def test_env_values_are_redacted_by_name_and_length():
    redactor = Redactor()
    redactor.add_env({"DB_PASSWORD": "hunter2", "DEBUG": "1", "PORT": "5432",
                      "REGION": "eu-west-1a-long", "HOST": "db.internal.example",
                      "CONN": "Srv=db;Uid=a;Pwd=Zz9"})
    text, counts = redactor.redact(
        "hunter2 hunter22 1 5432 eu-west-1a-long db.internal.example Srv=db;Uid=a;Pwd=Zz9")
    # hunter2 only as a whole word; short, numeric and plain-word values stay.
    assert text == ("[REDACTED:env] hunter22 1 5432 [REDACTED:env] db.internal.example"
                    " [REDACTED:env]")
    assert counts == {"env": 3}


def test_json_escaped_values_are_redacted_too():
    redactor = Redactor({'pa"ss\\word': "env"})
    line = json.dumps({"text": 'the password is pa"ss\\word'})
    redacted, counts = redactor.redact(line)
    assert json.loads(redacted) == {"text": "the password is [REDACTED:env]"}
    assert counts == {"env": 1}


def test_learn_takes_provider_keys_assigned_in_text_and_redacts_them_everywhere():
    redactor = Redactor()
    log = '{"text": "ran export ANTHROPIC_API_KEY=abc123longvalue"}\n{"text": "abc123longvalue"}'
    assert redactor.learn(log) == 1
    redacted, counts = redactor.redact(log)
    assert "abc123longvalue" not in redacted
    assert counts == {"provider-key": 2}
    for line in redacted.splitlines():
        json.loads(line)


def test_a_provider_key_value_is_counted_as_a_provider_key():
    redactor = Redactor()
    redactor.add_env({"HANKWEAVE_OPENAI_API_KEY": "plainkeyvalue"}, secret_names_only=True)
    assert redactor.redact("plainkeyvalue") == ("[REDACTED:provider-key]", {"provider-key": 1})


def test_redacting_twice_changes_and_counts_nothing():
    redactor = Redactor({"hunter2": "env"})
    once, _ = redactor.redact(f"DB_PASSWORD=hunter2 {GITHUB} https://u:p4ss@h Bearer abcdef123456789")
    assert redactor.redact(once) == (once, {})


def test_bytes_that_are_not_utf8_survive_redaction():
    data = b"\xff\xfe binary " + GITHUB.encode() + b" \x00\x81"
    redacted, counts = Redactor().redact_bytes(data)
    assert redacted == b"\xff\xfe binary [REDACTED:token] \x00\x81"
    assert counts == {"token": 1}


def test_markers_need_no_json_escape():
    for kind in REDACTION_KINDS:
        marker = redaction_marker(kind)
        assert json.dumps(marker) == f'"{marker}"'


@pytest.mark.parametrize(("name", "secret"), [
    ("DB_PASSWORD", True), ("MY_API_KEY", True), ("GITHUB_TOKEN", True), ("AWS_SECRET", True),
    ("SSH_PRIVATE_KEY", True), ("DB_PWD", True), ("ACCESS_TOKENS", True),
    ("DEBUG", False), ("PWD", False), ("OLDPWD", False), ("TOKENIZERS_PARALLELISM", False),
    ("MONKEY_MODE", False), ("PATH", False),
])
def test_secret_names(name, secret):
    assert is_secret_name(name) is secret


@pytest.mark.parametrize("name", [
    "ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY",
    "HANKWEAVE_SENTINEL_ANTHROPIC_API_KEY", "HANKWEAVE_OPENAI_API_KEY", "SOMEPROVIDER_API_KEY",
    "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "GITHUB_TOKEN",
])
def test_provider_key_names(name):
    assert is_provider_key_name(name)
