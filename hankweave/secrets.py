"""Secrets in text the project writes: credentials inside URLs, masked wherever we print them.

A URL's userinfo (``redis://:hunter2@host``, ``https://user:token@collector``) is a credential
the person typed into a setting or a variable; it must not reach the terminal, ``server.log``,
an error message or an event.  :func:`mask_url_credentials` keeps the scheme, the user name and
the host, so a message still says which server it is about, and replaces the password (or a
lone token used as the user name) with ``***``.

Text shared with others (an export, a log handed on) is *redacted*: :class:`Redactor` replaces
known secret values (env values, provider keys, also those it :meth:`~Redactor.learn` from the
text itself) and recognisable credentials (token shapes, ``Bearer`` tokens, URL passwords) with
``[REDACTED:<kind>]`` (:data:`REDACTION_KINDS`) and counts them; :func:`redact_text` is the same
without known values.  docs/api.md says what is covered and what is not.
"""

from __future__ import annotations

import json
import logging
import re
from collections import Counter
from collections.abc import Mapping

from hankweave.providers import KEY_FALLBACKS, KEY_VARIABLES, sentinel_key_variable

__all__ = [
    "MASK",
    "PROVIDER_KEY_VARIABLES",
    "REDACTION_KINDS",
    "TOKEN_SHAPES",
    "MaskingFormatter",
    "Redactor",
    "is_provider_key_name",
    "is_secret_name",
    "mask_log_output",
    "mask_url_credentials",
    "redact_text",
    "redaction_marker",
]

MASK = "***"

# scheme://userinfo@ (the scheme RFC 3986's), the userinfo stopping at whitespace, '/', '@',
# quotes, backslashes, commas and angle brackets, so masking never eats into the JSON around a
# URL ("https://a.example","mail":"x@y").
_URL_USERINFO = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^\s/@:?#\"'\\,<>]*)"
    r"(?::(?P<password>[^\s/@?#\"'\\,<>]*))?@")


def _mask(match: re.Match[str]) -> str:
    scheme, user, password = match["scheme"], match["user"], match["password"]
    if password is None:  # a lone token in the user name's place: https://TOKEN@host
        return f"{scheme}{MASK}@" if user else match[0]
    return f"{scheme}{user}:{MASK}@"


def mask_url_credentials(text: str) -> str:
    """``text`` with the password (or lone token) of every ``scheme://user:pass@`` masked."""
    if "@" not in text:
        return text
    return _URL_USERINFO.sub(_mask, text)


class MaskingFormatter(logging.Formatter):
    """A formatter whose every line has its URL credentials masked: the net under the handlers
    the project owns (``server.log``, the last-resort handler that prints other libraries'
    warnings on stderr), for a library's message or traceback that quotes a URL."""

    def format(self, record: logging.LogRecord) -> str:
        return mask_url_credentials(super().format(record))


def mask_log_output(handler: logging.Handler) -> None:
    """Give ``handler`` a :class:`MaskingFormatter` in place of its formatter (same format)."""
    current = handler.formatter
    handler.setFormatter(MaskingFormatter(current._fmt if current else None,
                                          current.datefmt if current else None))


# ----- redaction: secrets replaced in text shared with others (exports, logs) -----------------

REDACTION_KINDS: tuple[str, ...] = ("env", "provider-key", "token", "url-credentials")
"""What a redaction replaced, as its marker names it (``[REDACTED:<kind>]``):

* ``env``: the value of an environment variable: a value of a hank's or the settings' ``env``
  map, of the ``HANKWEAVE_<X>`` agent passthrough, of a secret-looking variable of the shell,
  or the value assigned to a secret-looking name (``DB_PASSWORD=...``) in any text;
* ``provider-key``: the value of a provider's key variable (:data:`PROVIDER_KEY_VARIABLES`, any
  ``*_API_KEY``), wherever it was set or printed;
* ``token``: text shaped like a credential (:data:`TOKEN_SHAPES`, ``Bearer ...``);
* ``url-credentials``: the password (or a long lone token) in a URL's ``user:pass@``.
"""

PROVIDER_KEY_VARIABLES: frozenset[str] = frozenset({
    *KEY_VARIABLES.values(),
    *(name for names in KEY_FALLBACKS.values() for name in names),
    *(sentinel_key_variable(provider) for provider in KEY_VARIABLES),
    # Credentials of the clouds and forges agents commonly use, and the Claude CLI's own.
    "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AZURE_OPENAI_API_KEY", "GITHUB_TOKEN",
    "GH_TOKEN", "GITLAB_TOKEN", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
})
"""Variables whose value is a provider credential (the kernel's key tables, the sentinels'
``HANKWEAVE_SENTINEL_<P>_API_KEY``, common cloud tokens).  Any ``*_API_KEY`` and the
``HANKWEAVE_<X>`` passthrough spelling of each count too (:func:`is_provider_key_name`)."""

MIN_SECRET_LENGTH = 4
"""A secret-named variable's value shorter than this is redacted only where it is assigned
(``NAME=value``, ``"NAME": "value"``), never as a bare string: replacing every ``abc`` of a
recording would mangle it."""
MIN_ENV_VALUE_LENGTH = 8
"""The value of an ``env`` map variable whose name does not look secret is redacted from this
length on (``DEBUG=1`` must not redact every ``1``)."""

TOKEN_SHAPES = re.compile(
    r"(?<![A-Za-z0-9])(?:"
    r"sk-ant-[A-Za-z0-9_\-]{4,}"                   # Anthropic
    r"|sk-(?:proj-|svcacct-)?[A-Za-z0-9_\-]{16,}"  # OpenAI and OpenAI-style keys
    r"|AKIA[0-9A-Z]{16}"                           # AWS access key id
    r"|gh[pousr]_[A-Za-z0-9]{30,}"                 # GitHub tokens
    r"|github_pat_[A-Za-z0-9_]{30,}"               # GitHub fine-grained tokens
    r"|glpat-[A-Za-z0-9_\-]{20,}"                  # GitLab
    r"|hf_[A-Za-z0-9]{30,}"                        # Hugging Face
    r"|AIza[0-9A-Za-z_\-]{35}"                     # Google
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}"              # Slack
    r")")
"""Credentials recognisable by their shape alone; anchored so that a word merely containing
``sk-`` (``task-...``) survives."""

# "Bearer <credential>": at least 12 characters with a digit, so "Bearer authentication" in prose
# survives; the word itself stays, so the text still reads.
_BEARER = re.compile(r"(?P<word>\b[Bb]earer\s+)(?!\[REDACTED)"
                     r"(?P<token>(?=[A-Za-z0-9._~+/\-]*[0-9])[A-Za-z0-9._~+/\-]{12,}=*)")
_LONE_URL_TOKEN = re.compile(r"[A-Za-z0-9_\-]{20,}")
"""A URL's lone user name this long is a token (``https://TOKEN@host``), not a user name."""

_STRONG_SECRET_WORDS = re.compile(
    r"SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|APIKEY|ACCESSKEY|PRIVATE_?KEY", re.IGNORECASE)
_WEAK_SECRET_PARTS = frozenset({"KEY", "TOKEN", "PWD", "PASS", "AUTH", "PAT", "DSN"})
_NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD"})  # the shell's working directories

# NAME=value and "NAME": "value" (also JSON-escaped inside a log line, \"NAME\": \"value\"):
# an environment-style name (upper case), then the value up to a space, quote, backslash or
# bracket (trailing dots end a sentence, not the value).  A value that is a reference or a
# placeholder ($X, ${X}, %X%, <key>) or code (a call or subscript follows) is not a secret; an
# earlier marker is not redacted twice.
_ASSIGNMENT = re.compile(
    r"(?<![A-Za-z0-9_])(?P<name>[A-Z][A-Z0-9_]{2,})"
    r"(?P<sep>=(?:\\?[\"'])?|\\?\"\s*:\s*\\?\")"
    r"(?![$%<]|\[REDACTED)(?P<value>[^\s\"'`\\,;{}\[\]()<>]+?)(?P<end>\.*)(?=[\s\"'`\\,;{}\])<>]|$)")
# A secret-named parameter of a URL's query: ?api_key=...&password=...
_QUERY_ASSIGNMENT = re.compile(
    r"(?P<lead>[?&](?P<name>[A-Za-z][A-Za-z0-9_\-]*)=)(?!\[REDACTED)(?P<value>[^\s&#\"'\\<>]+)")
# Values that are JSON literals, numbers or switches: never a secret, and replacing them in a
# JSON file (a number, `false`) would break it; nor is the placeholder of docs (`KEY=...`).
_NOT_SECRET_VALUE = re.compile(
    r"(?i:true|false|null|none|nil|unset|yes|no|on|off|enabled?|disabled?)"
    r"|[+\-]?[0-9]+(?:\.[0-9]+)*(?:[eE][+\-]?[0-9]+)?|\.+|…")
# A non-secret-named value made of lower-case letters and separators: a word, a host, a path.
_PLAIN_WORDS = re.compile(r"[a-z._/:\-]+")
_WORD_CHAR = "A-Za-z0-9"


def redaction_marker(kind: str) -> str:
    """``[REDACTED:<kind>]``: contains no character JSON escapes, so a redacted JSON line stays
    valid JSON."""
    return f"[REDACTED:{kind}]"


def is_provider_key_name(name: str) -> bool:
    """Whether variable ``name`` holds a provider credential (its ``HANKWEAVE_`` passthrough
    spelling included)."""
    bare = name.removeprefix("HANKWEAVE_")
    return name in PROVIDER_KEY_VARIABLES or bare in PROVIDER_KEY_VARIABLES or \
        bare.upper().endswith("_API_KEY")


def is_secret_name(name: str) -> bool:
    """Whether variable ``name`` looks like it holds a secret: a provider key, a name containing
    ``SECRET``, ``PASSWORD``, ``CREDENTIAL``, ... or one of its ``_``-separated parts being
    ``KEY``, ``TOKEN``, ``PWD``, ``PASS``, ``AUTH``, ``PAT`` or ``DSN``."""
    if name.upper() in _NOT_SECRET_NAMES:
        return False
    if is_provider_key_name(name) or _STRONG_SECRET_WORDS.search(name):
        return True
    return any(part.rstrip("S") in _WEAK_SECRET_PARTS or part in _WEAK_SECRET_PARTS
               for part in name.upper().split("_"))


def _assignment_kind(name: str) -> str | None:
    if is_provider_key_name(name):
        return "provider-key"
    return "env" if is_secret_name(name) else None


class Redactor:
    """Replaces secrets in text with ``[REDACTED:<kind>]`` and counts them by kind.

    Built from the secret values it knows (:meth:`add_value`, :meth:`add_env`, :meth:`learn`),
    it replaces, in this order: every occurrence of a known value (also JSON-escaped; a value
    shorter than :data:`MIN_ENV_VALUE_LENGTH` only as a whole word), the value assigned to a
    secret-looking name (``NAME=value``, ``"NAME": "value"``, ``?api_key=value``), the
    :data:`TOKEN_SHAPES` and ``Bearer`` tokens, and URL passwords.  With no known values it is
    :func:`redact_text`.  Text already redacted is left as it is (redacting twice counts
    nothing).
    """

    def __init__(self, values: Mapping[str, str] | None = None) -> None:
        self._kinds: dict[str, str] = {}
        self._pattern: re.Pattern[str] | None = None
        self._compiled = True
        for value, kind in (values or {}).items():
            self.add_value(value, kind)

    def add_value(self, value: str, kind: str) -> bool:
        """Redact ``value`` wherever it occurs; False when it is too short or not a secret."""
        value = value.strip()
        if len(value) < MIN_SECRET_LENGTH or _NOT_SECRET_VALUE.fullmatch(value) \
                or value.startswith("[REDACTED"):
            return False
        for form in {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}:
            if self._kinds.get(form) != "provider-key":  # the more specific kind wins
                self._kinds[form] = kind
        self._compiled = False
        return True

    def add_env(self, env: Mapping[str, str], *, kind: str = "env",
                secret_names_only: bool = False) -> None:
        """Redact the values of ``env``: a secret-looking name's value from
        :data:`MIN_SECRET_LENGTH` characters on; any other name's from
        :data:`MIN_ENV_VALUE_LENGTH` on unless it is plainly not a secret (a number, a switch,
        a lower-case word, host or path).  ``secret_names_only`` (for a whole shell
        environment, ``PATH`` and all) takes only secret-looking names, from
        :data:`MIN_ENV_VALUE_LENGTH` characters on."""
        for name, value in env.items():
            secret = is_secret_name(name)
            own_kind = "provider-key" if is_provider_key_name(name) else kind
            value = value.strip()
            long_enough = len(value) >= MIN_ENV_VALUE_LENGTH
            if secret_names_only:
                wanted = secret and long_enough
            else:
                wanted = secret or (long_enough and not _PLAIN_WORDS.fullmatch(value))
            if wanted:
                self.add_value(value, own_kind)

    def learn(self, text: str) -> int:
        """Take, from ``text``, the values assigned to provider-key variables
        (``ANTHROPIC_API_KEY=...``, ``"OPENAI_API_KEY": "..."``, ``export X=...``), so they are
        redacted everywhere, not only where they are assigned.  Returns how many were new."""
        learned = 0
        for match in _ASSIGNMENT.finditer(text):
            if is_provider_key_name(match["name"]) and match["value"] not in self._kinds:
                learned += self.add_value(match["value"], "provider-key")
        return learned

    def redact(self, text: str) -> tuple[str, Counter[str]]:
        """``text`` with every secret replaced, and how many of each kind were replaced."""
        counts: Counter[str] = Counter()
        pattern = self._values_pattern()
        if pattern is not None:
            text = pattern.sub(lambda m: self._replace(m[0], self._kinds[m[0]], counts), text)
        text = _ASSIGNMENT.sub(lambda m: _assigned(m, counts), text)
        text = _QUERY_ASSIGNMENT.sub(lambda m: _query_assigned(m, counts), text)
        text = TOKEN_SHAPES.sub(lambda m: self._replace(m[0], "token", counts), text)
        text = _BEARER.sub(lambda m: m["word"] + self._replace(m["token"], "token", counts), text)
        if "@" in text:
            text = _URL_USERINFO.sub(lambda m: _url_redacted(m, counts), text)
        return text, counts

    def redact_bytes(self, data: bytes) -> tuple[bytes, Counter[str]]:
        """:meth:`redact` for a file's bytes: UTF-8 text is redacted, other bytes pass through
        unchanged (so a binary file survives unless a secret's bytes occur in it)."""
        text, counts = self.redact(data.decode("utf-8", "surrogateescape"))
        return (text.encode("utf-8", "surrogateescape") if counts else data), counts

    @staticmethod
    def _replace(_found: str, kind: str, counts: Counter[str]) -> str:
        counts[kind] += 1
        return redaction_marker(kind)

    def _values_pattern(self) -> re.Pattern[str] | None:
        if not self._compiled:
            # Longest first, so a secret containing another is replaced whole; a short value
            # only as a whole word.
            forms = sorted(self._kinds, key=len, reverse=True)
            parts = [re.escape(f) if len(f) >= MIN_ENV_VALUE_LENGTH else
                     f"(?<![{_WORD_CHAR}]){re.escape(f)}(?![{_WORD_CHAR}])" for f in forms]
            self._pattern = re.compile("|".join(parts)) if parts else None
            self._compiled = True
        return self._pattern


def _assigned(match: re.Match[str], counts: Counter[str]) -> str:
    kind = _assignment_kind(match["name"])
    if kind is None or _NOT_SECRET_VALUE.fullmatch(match["value"]):
        return match[0]
    counts[kind] += 1
    return f"{match['name']}{match['sep']}{redaction_marker(kind)}{match['end']}"


def _query_assigned(match: re.Match[str], counts: Counter[str]) -> str:
    if not is_secret_name(match["name"].replace("-", "_")) or \
            _NOT_SECRET_VALUE.fullmatch(match["value"]):
        return match[0]
    counts["env"] += 1
    return f"{match['lead']}{redaction_marker('env')}"


def _url_redacted(match: re.Match[str], counts: Counter[str]) -> str:
    scheme, user, password = match["scheme"], match["user"], match["password"]
    if password is None:  # a lone user name: a token only when it is long (https://TOKEN@host)
        if not _LONE_URL_TOKEN.fullmatch(user):
            return match[0]
        counts["url-credentials"] += 1
        return f"{scheme}{redaction_marker('url-credentials')}@"
    if not password or password.startswith("[REDACTED"):
        return match[0]
    counts["url-credentials"] += 1
    return f"{scheme}{user}:{redaction_marker('url-credentials')}@"


def redact_text(text: str) -> tuple[str, Counter[str]]:
    """``text`` with what is recognisable without knowing any secret replaced (token shapes,
    ``Bearer`` tokens, URL passwords, values assigned to secret-looking names), and the count
    of each kind replaced.  A :class:`Redactor` also replaces values it was given."""
    return Redactor().redact(text)
