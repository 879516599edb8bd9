"""Configuration errors and their formatting.

Every problem found in a configuration file becomes a :class:`HankIssue` naming the JSON path where
it was found (`hank[2].rigSetup[0].command.run`) and what is wrong. All issues of one file are
raised together in one :class:`ConfigValidationError`, so an author fixes a file in one pass.

This module also owns the translation of pydantic's `ValidationError` into issues: it walks each
error location through the model classes, so union tags vanish from paths, unknown keys get the
owning model's hint, and model-level rules can report several problems at once (see
:func:`raise_rule_violations`).
"""

from __future__ import annotations

import json
import re
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

from pydantic import BaseModel, Discriminator, Tag, ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

ROOT_PATH = "<root>"
"""How an issue about the whole document names its path."""

PathSegment = str | int
"""One step of a JSON path: an object key or an array index."""


class ConfigError(Exception):
    """A configuration file is missing, unreadable or invalid. The message is meant for the user."""


@dataclass(frozen=True)
class HankIssue:
    """One problem in a configuration file: where it is (a JSON path) and what is wrong."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class ConfigValidationError(ConfigError):
    """A configuration file was read but its content is invalid; carries every problem found."""

    kind: ClassVar[str] = "configuration file"

    def __init__(
        self, source: str, errors: Sequence[HankIssue], warnings: Sequence[HankIssue] = ()
    ) -> None:
        self.source = source
        self.errors: list[HankIssue] = list(errors)
        self.warnings: list[HankIssue] = list(warnings)
        """Problems found on the way that would not have stopped the file from loading."""
        super().__init__(self._render())

    def _render(self) -> str:
        count = len(self.errors)
        noun = "problem" if count == 1 else "problems"
        lines = [f"Invalid {self.kind} {self.source}: {count} {noun}"]
        lines.extend(f"  - {issue}" for issue in self.errors)
        return "\n".join(lines)


class HankValidationError(ConfigValidationError):
    """A hank file (`hank.json`) is invalid."""

    kind = "hank file"


class RuntimeConfigValidationError(ConfigValidationError):
    """A runtime settings file (`hankweave.json`) is invalid."""

    kind = "runtime config"


# --------------------------------------------------------------------------------------------
# Reading JSON documents
# --------------------------------------------------------------------------------------------


def read_config_json(path: Path, *, what: str, invalid: type[ConfigValidationError]) -> object:
    """Read and decode the JSON document at `path`.

    `what` names the file kind in messages ("Hank file"). A missing or unreadable file raises
    :class:`ConfigError`; text that is not JSON raises `invalid` with one issue at the root that
    says where the JSON breaks.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{what} not found: {path}") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} {path} is a directory, not a file") from None
    except OSError as exc:
        raise ConfigError(f"Cannot read {what.lower()} {path}: {exc.strerror or exc}") from None
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        message = f"File is not valid UTF-8 (byte offset {exc.start})"
    except json.JSONDecodeError as exc:
        message = f"Invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
    raise invalid(str(path), [HankIssue(ROOT_PATH, message)])


# --------------------------------------------------------------------------------------------
# Rules that report several problems at once
# --------------------------------------------------------------------------------------------

RULES_ERROR_TYPE = "hank_rules"


class RuleViolation(NamedTuple):
    """A cross-field rule that failed: `at` is relative to the model that checks the rule."""

    at: tuple[PathSegment, ...]
    message: str


def raise_rule_violations(violations: Iterable[RuleViolation]) -> None:
    """Raise one pydantic error that carries every violation, if there are any.

    A pydantic validator can raise only one error, but a model may break several of its rules at
    once; :func:`issues_from_validation_error` expands this error back into one issue per
    violation, each at its own path.
    """
    found = list(violations)
    if found:
        raise PydanticCustomError(
            RULES_ERROR_TYPE,
            "{summary}",
            {
                "summary": "; ".join(v.message for v in found),
                "violations": [[list(v.at), v.message] for v in found],
            },
        )


# --------------------------------------------------------------------------------------------
# pydantic errors -> issues
# --------------------------------------------------------------------------------------------

MessageOverride = Callable[[ErrorDetails, Sequence[PathSegment]], str]
"""Rewrites the message of one pydantic error type, given the error and its cleaned path."""

_GENERIC_MESSAGES = {
    "model_type": "Input should be an object",
    "model_attributes_type": "Input should be an object",
    "dict_type": "Input should be an object",
    "list_type": "Input should be an array",
}
# pydantic's own union member labels, e.g. "function-after[check(), str]" or "list[str]".
_PYDANTIC_TAG = re.compile(r"^[\w-]+\[.*\]$")
_PLAIN_KEY = re.compile(r"^[A-Za-z_$][\w$-]*$")


def format_path(segments: Sequence[PathSegment]) -> str:
    """Render path segments as `hank[2].rigSetup[0].command.run` (`<root>` when empty)."""
    out: list[str] = []
    for segment in segments:
        if isinstance(segment, int):
            out.append(f"[{segment}]")
        elif _PLAIN_KEY.match(segment):
            out.append(f".{segment}" if out else segment)
        else:
            out.append(f"[{json.dumps(segment)}]")
    return "".join(out) or ROOT_PATH


@dataclass(frozen=True)
class IgnoredKey:
    """An unknown key in an object whose model ignores unknown keys (``ignores_unknown_keys``)."""

    at: tuple[PathSegment, ...]
    """Where the key is in the document, the key itself last."""
    valid_fields: tuple[str, ...]
    """The keys that object does accept."""

    def issue(self) -> HankIssue:
        """The warning: the key's path and that it is ignored."""
        return HankIssue(
            format_path(self.at),
            f'unknown key "{self.at[-1]}" is ignored (this object accepts: '
            f"{', '.join(self.valid_fields)})",
        )


def issues_from_validation_error(
    exc: ValidationError,
    root: type[BaseModel],
    overrides: Mapping[str, MessageOverride] | None = None,
    ignored: list[IgnoredKey] | None = None,
) -> list[HankIssue]:
    """Translate a pydantic `ValidationError` raised by `root` into issues, in order.

    Paths use JSON names and drop union tags. Unknown keys are grouped per object and worded by
    the owning model's `unknown_field_issues(keys)` classmethod when it has one; it returns
    `(key, message)` pairs, where a `None` key puts the issue at the object itself. A model's
    `field_messages` (JSON field name -> message) replaces the message of any error located
    exactly at that field. `overrides` rewrites messages by pydantic error type.

    With `ignored`, an unknown key in a model whose `ignores_unknown_keys` is true is appended
    there instead of becoming an issue.
    """
    # An entry is a finished issue, or the path of an object with unknown keys: those keys are
    # collected first so each object gets its unknown keys described together, in place.
    entries: list[HankIssue | tuple[PathSegment, ...]] = []
    unknown: dict[tuple[PathSegment, ...], tuple[type[BaseModel] | None, list[str]]] = {}
    for error in exc.errors():
        if error["type"] == RULES_ERROR_TYPE:
            for at, message in error.get("ctx", {}).get("violations", []):
                located = _locate(root, (*error["loc"], *at))
                entries.append(HankIssue(format_path(located.segments), message))
            continue
        located = _locate(root, error["loc"])
        if error["type"] == "extra_forbidden" and located.unknown_key is not None:
            if ignored is not None and getattr(located.owner, "ignores_unknown_keys", False):
                assert located.owner is not None
                ignored.append(IgnoredKey(tuple(located.segments), _json_fields(located.owner)))
                continue
            parent = tuple(located.segments[:-1])
            if parent not in unknown:
                unknown[parent] = (located.owner, [])
                entries.append(parent)
            unknown[parent][1].append(located.unknown_key)
            continue
        entries.append(
            HankIssue(format_path(located.segments), _message(error, located, overrides))
        )

    issues: list[HankIssue] = []
    for entry in entries:
        if isinstance(entry, HankIssue):
            issues.append(entry)
            continue
        owner, keys = unknown[entry]
        hook = getattr(owner, "unknown_field_issues", None)
        described = hook(keys) if hook else [(key, _unknown_message(owner, key)) for key in keys]
        for key, message in described:
            issues.append(
                HankIssue(format_path((*entry, key) if key is not None else entry), message)
            )
    return issues


def unrecognized_field_message(key: str, valid_fields: Sequence[str]) -> str:
    """The message for an unknown key, listing the fields its object accepts."""
    return f'Unrecognized field "{key}". Valid fields are: {", ".join(valid_fields)}.'


def _json_fields(model: type[BaseModel]) -> tuple[str, ...]:
    return tuple(field.alias or name for name, field in model.model_fields.items())


def _unknown_message(owner: type[BaseModel] | None, key: str) -> str:
    if owner is None:
        return f'Unrecognized field "{key}".'
    return unrecognized_field_message(key, _json_fields(owner))


def _message(
    error: ErrorDetails, located: _Located, overrides: Mapping[str, MessageOverride] | None
) -> str:
    if overrides and error["type"] in overrides:
        return overrides[error["type"]](error, located.segments)
    shown = _shown_input(error)
    field = located.field
    if located.owner is not None and field is not None:
        field_messages: Mapping[str, str] = getattr(located.owner, "field_messages", {})
        if field in field_messages:
            message = field_messages[field]
            # "continuationMode must be ..." -> 'continuationMode "sideways" must be ...'
            if shown is not None and message.startswith(f"{field} "):
                return f"{field} {shown} {message[len(field) + 1 :]}"
            return message
    ctx = error.get("ctx", {})
    if error["type"] == "union_tag_not_found":
        return f"Field {ctx.get('discriminator', '')} is required".replace("'", '"')
    if error["type"] == "union_tag_invalid":
        discriminator = str(ctx.get("discriminator", "")).replace("'", '"')
        return f"{discriminator} must be one of {ctx.get('expected_tags')}, not {ctx.get('tag')!r}"
    if error["type"] == "literal_error" and shown is not None:
        return f"{field or 'value'} {shown} must be one of {ctx.get('expected')}"
    if error["type"] == "value_error" and "error" in ctx:
        # A validator's own sentence, without pydantic's "Value error, " in front.
        return str(ctx["error"])
    message = _GENERIC_MESSAGES.get(error["type"], error["msg"])
    return message if shown is None else _with_input(message, error, shown)


def _with_input(message: str, error: ErrorDetails, shown: str) -> str:
    """`message` with the bad value quoted, unless that would only repeat the message."""
    value = error["input"]
    if isinstance(value, dict | list):
        # "Input should be an object (got an array)"; but not "At least one codon required".
        return f"{message} (got {shown})" if error["type"].endswith("_type") else message
    if value is None and "null" in message:
        return message
    if isinstance(value, str) and (not value.strip() or value in message):
        return message  # "... cannot be empty", or a message that quotes the value already
    return f"{message} (got {shown})"


_SHOWN_LENGTH = 60


def _shown_input(error: ErrorDetails) -> str | None:
    """The bad value as an author would recognise it in the file, or None for a missing one."""
    if error["type"] == "missing" or "input" not in error:
        return None
    value = error["input"]
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    text = json.dumps(value, ensure_ascii=False)
    if len(text) > _SHOWN_LENGTH:
        text = text[: _SHOWN_LENGTH - 4] + '..."'
    return text


@dataclass
class _Located:
    segments: list[PathSegment]
    # The model whose field the location ends on, and that field's JSON name.
    owner: type[BaseModel] | None = None
    field: str | None = None
    unknown_key: str | None = None


def _locate(root: type[BaseModel], loc: Sequence[PathSegment]) -> _Located:
    """Walk `loc` through the model classes, keeping object keys and array indexes only."""
    located = _Located(segments=[])
    current: Any = root
    for element in loc:
        current = _strip(current)
        members = _union_members(current)
        if members is not None:
            chosen = _member_for_tag(members, element)
            if chosen is not None:
                current = chosen
                continue
            current = None
            if isinstance(element, str) and _PYDANTIC_TAG.match(element):
                continue
        located.owner, located.field, located.unknown_key = None, None, None
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = _field_by_alias(current, str(element))
            located.segments.append(element)
            located.owner, located.field = current, str(element)
            if field is None:
                located.unknown_key = str(element)
                current = None
            else:
                current = field
            continue
        origin = typing.get_origin(current)
        if origin in (list, tuple, set, frozenset, Sequence):
            current = (typing.get_args(current) or (None,))[0]
        elif origin in (dict, Mapping):
            if element == "[key]":
                continue
            current = (typing.get_args(current) or (None, None))[1]
        else:
            current = None
        located.segments.append(element)
    return located


def _field_by_alias(model: type[BaseModel], key: str) -> Any | None:
    for name, field in model.model_fields.items():
        if (field.alias or name) == key:
            return field.annotation
    return None


def _strip(tp: Any) -> Any:
    """Remove `Annotated` wrappers and the `None` arm of optional types."""
    while True:
        if typing.get_origin(tp) is typing.Annotated:
            tp = typing.get_args(tp)[0]
            continue
        args = typing.get_args(tp)
        if _is_union(tp) and type(None) in args:
            rest = [arg for arg in args if arg is not type(None)]
            tp = rest[0] if len(rest) == 1 else typing.Union[tuple(rest)]  # noqa: UP007
            continue
        return tp


def _is_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType)


def _union_members(tp: Any) -> list[Any] | None:
    return list(typing.get_args(tp)) if _is_union(tp) else None


def _member_for_tag(members: list[Any], element: PathSegment) -> Any | None:
    """The union member a pydantic tag in an error location stands for, if `element` is one."""
    if not isinstance(element, str):
        return None
    for member in members:
        if typing.get_origin(member) is typing.Annotated:
            inner, *metadata = typing.get_args(member)
            if any(isinstance(m, Tag) and m.tag == element for m in metadata):
                return inner
            member = inner
        if isinstance(member, type) and issubclass(member, BaseModel):
            # Members of a union discriminated on a field (e.g. `type`) are tagged by its value.
            for field in member.model_fields.values():
                literal = _strip(field.annotation)
                if typing.get_origin(literal) is typing.Literal and element in typing.get_args(
                    literal
                ):
                    return member
    return None


# --------------------------------------------------------------------------------------------
# Rules on raw data
# --------------------------------------------------------------------------------------------


def raw_rule_violations(root: type[BaseModel], data: object) -> list[RuleViolation]:
    """Every cross-field rule broken anywhere in `data`, read as JSON for the model `root`.

    pydantic runs an object's rules only when all of its fields (and everything below them)
    are valid; this walks the raw document instead and asks each model it finds for its
    ``rule_violations(raw)``, so broken rules are found next to field errors.  Where the model
    of a value cannot be told (a union whose member cannot be picked), that value is skipped.
    Each violation's path is absolute.
    """
    found: list[RuleViolation] = []
    _walk_rules(root, data, (), found)
    return found


def with_rule_issues(root: type[BaseModel], data: object,
                     issues: list[HankIssue]) -> list[HankIssue]:
    """`issues` (from a failed validation) plus the rules `data` breaks that are not already
    among them: pydantic checks an object's rules only once its fields are valid, so the raw
    walk finds the broken rules beside the field errors and one pass shows every problem."""
    for violation in raw_rule_violations(root, data):
        issue = HankIssue(format_path(violation.at), violation.message)
        if issue not in issues:
            issues.append(issue)
    return issues


def _walk_rules(
    tp: Any, value: object, at: tuple[PathSegment, ...], found: list[RuleViolation]
) -> None:
    tp = _pick_member(tp, value)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        if not isinstance(value, dict):
            return
        rules = getattr(tp, "rule_violations", None)
        if rules is not None:
            found.extend(RuleViolation((*at, *v.at), v.message) for v in rules(value))
        for key, item in value.items():
            field = _field_by_alias(tp, str(key))
            if field is not None:
                _walk_rules(field, item, (*at, key), found)
        return
    origin = typing.get_origin(tp)
    if origin in (list, tuple, Sequence) and isinstance(value, list):
        item_type = (typing.get_args(tp) or (None,))[0]
        for index, item in enumerate(value):
            _walk_rules(item_type, item, (*at, index), found)
    elif origin in (dict, Mapping) and isinstance(value, dict):
        value_type = (typing.get_args(tp) or (None, None))[1]
        for key, item in value.items():
            _walk_rules(value_type, item, (*at, key), found)


def _pick_member(tp: Any, value: object) -> Any:
    """The type `value` is validated as: `tp` without wrappers, or the union member it picks.

    A union is resolved through its discriminator (a callable ``Discriminator`` with tagged
    members, or a field name); a union of one model and non-models picks the model for an
    object.  Otherwise the result is None (nothing to walk).
    """
    discriminator: Any = None
    while True:
        if typing.get_origin(tp) is typing.Annotated:
            inner, *metadata = typing.get_args(tp)
            for meta in metadata:
                found = meta if isinstance(meta, Discriminator) else getattr(meta, "discriminator", None)
                if isinstance(found, str | Discriminator):
                    discriminator = found
            tp = inner
            continue
        stripped = _strip(tp)
        if stripped is tp:
            break
        tp = stripped
    members = _union_members(tp)
    if members is None:
        return tp
    if isinstance(discriminator, Discriminator) and callable(discriminator.discriminator):
        tag = discriminator.discriminator(value)
        return _member_for_tag(members, tag) if isinstance(tag, str) else None
    if isinstance(discriminator, str) and isinstance(value, dict):
        tag = value.get(discriminator)
        return _member_for_tag(members, tag) if isinstance(tag, str) else None
    models = [m for m in map(_strip, members) if isinstance(m, type) and issubclass(m, BaseModel)]
    return models[0] if len(models) == 1 and isinstance(value, dict) else None
