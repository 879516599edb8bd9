"""Trigger conditions: which events sentinels see, which paths a condition may name, and whether
a condition holds (``condition-evaluator.ts`` and the path check of ``sentinel.schema.ts``).

Everything here is pure: no I/O, no runtime state.  The semantics are Hankweave 0.10.0's, which
are JavaScript's:

* a path is dotted into the event's ``data``; a missing value (``undefined``) makes every
  operator false, while a present ``null`` is an ordinary value;
* ``equals``/``notEquals``/``in``/``notIn`` compare with ``===``: ``1`` equals ``1.0`` but
  neither equals ``true``;
* ``matches`` is a JavaScript ``RegExp`` test, translated to :mod:`re`; a pattern that does
  not compile is false, not an error.

At load time every condition path must exist in the payload model of at least one listed event
type (:func:`path_in_payload`), so a typo fails loudly instead of never firing.
"""

from __future__ import annotations

import functools
import math
import re
import types
import typing
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from pydantic import BaseModel

from hankweave.events.catalogue import EVENT_DATA_MODELS, routes_to_sentinels
from hankweave.sentinels.jsvalues import JS_UNDEFINED, is_js_number, js_strict_equal

WILDCARD = "*"
"""In ``on``, ``interestFilter.on`` or a pattern step's ``type``: any event type."""

VIRTUAL_FIELDS: Mapping[str, frozenset[str]] = {"file.updated": frozenset({"content"})}
"""Fields a sentinel's view of an event gains at trigger time (the late ``file.updated`` carries
only a fingerprint on the wire; sentinels get a lazily read ``content``).  Exact paths only:
``content.length`` is not virtual."""


def observable(event_type: str) -> bool:
    """Whether sentinels ever see events of this type: server-state and agentic-backbone only.

    Sentinel events never reach sentinels (a sentinel's output would trigger sentinels), and
    connection events go to one client only.
    """
    return routes_to_sentinels(event_type)


def known_event_type(name: str) -> bool:
    """Whether `name` may be listed in a trigger: a catalogue event type or ``*``."""
    return name == WILDCARD or name in EVENT_DATA_MODELS


# --------------------------------------------------------------------------------------------
# Load time: does a path exist in an event's payload model?
# --------------------------------------------------------------------------------------------


def path_in_payload(event_type: str, path: str) -> bool:
    """Whether the dotted `path` names a field of `event_type`'s payload model.

    The walk descends through nested models, optional fields and unions (a path is fine when
    any member accepts the rest of it); lists, mappings and untyped fields are leaves, as in
    the original, so ``toolInput.command`` is refused.  Unknown event types have no paths.
    """
    if path in VIRTUAL_FIELDS.get(event_type, ()):
        return True
    model = EVENT_DATA_MODELS.get(event_type)
    return model is not None and _accepts(model, path.split("."))


def payload_fields(event_type: str) -> list[str]:
    """The top-level JSON field names of `event_type`'s payload, for hints in messages."""
    model = EVENT_DATA_MODELS.get(event_type)
    fields = [] if model is None else _json_names(model)
    return sorted({*fields, *VIRTUAL_FIELDS.get(event_type, ())})


def _accepts(tp: Any, parts: Sequence[str]) -> bool:
    if not parts:
        return True
    for model in _models_in(tp):
        field = _field_type(model, parts[0])
        if field is not None and _accepts(field, parts[1:]):
            return True
    return False


def _models_in(tp: Any) -> list[type[BaseModel]]:
    """The models a value of type `tp` may be: through `Annotated`, optionals and unions."""
    if typing.get_origin(tp) is typing.Annotated:
        return _models_in(typing.get_args(tp)[0])
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return [model for arg in typing.get_args(tp) for model in _models_in(arg)]
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    return []


def _field_type(model: type[BaseModel], json_name: str) -> Any | None:
    for name, field in model.model_fields.items():
        if (field.alias or name) == json_name:
            return field.annotation
    return None


def _json_names(model: type[BaseModel]) -> list[str]:
    return [field.alias or name for name, field in model.model_fields.items()]


# --------------------------------------------------------------------------------------------
# Trigger time: does a condition hold?
# --------------------------------------------------------------------------------------------


class ConditionLike(Protocol):
    """What evaluation reads of a condition (the config models satisfy it)."""

    @property
    def operator(self) -> str: ...

    @property
    def path(self) -> str: ...

    @property
    def value(self) -> Any: ...


MISSING: Any = JS_UNDEFINED
"""What a missing path reads as: JavaScript's ``undefined``, distinct from ``null`` (None)."""


def value_at(data: object, path: str) -> Any:
    """The value at dotted `path` in `data`, or :data:`MISSING`.

    Like a JavaScript property walk: object keys, array indexes (``tree.0.name``) and the
    ``length`` of strings and arrays.  `data` may be any mapping, including a lazy one.
    """
    current: Any = data
    for part in path.split("."):
        current = _step(current, part)
        if current is MISSING:
            break
    return current


def _step(current: Any, part: str) -> Any:
    if isinstance(current, Mapping):
        try:
            return current[part]
        except KeyError:
            return MISSING
    if isinstance(current, list | str):
        if part == "length":
            return len(current)
        if part.isdigit() and (part == "0" or not part.startswith("0")):
            index = int(part)
            return current[index] if index < len(current) else MISSING
    return MISSING


def conditions_hold(conditions: Iterable[ConditionLike] | None, data: Mapping[str, Any]) -> bool:
    """Whether every condition holds for an event's `data` (AND; no conditions always holds)."""
    return all(condition_holds(condition, data) for condition in conditions or ())


def condition_holds(condition: ConditionLike, data: Mapping[str, Any]) -> bool:
    """Whether one condition holds; unknown operators and missing values are false."""
    actual = value_at(data, condition.path)
    if actual is MISSING:
        return False
    test = _OPERATORS.get(condition.operator)
    return test is not None and test(actual, condition.value)


# A condition's value comes from the config, the data from an event: never the same object, so
# an object or array is never strictly equal to a condition's value, as in JavaScript.
strictly_equal = js_strict_equal


def _same_value_zero(a: object, b: object) -> bool:
    # Array.prototype.includes: like === except that NaN finds NaN.
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return strictly_equal(a, b)


def _included(actual: object, values: object) -> bool:
    return isinstance(values, list) and any(_same_value_zero(item, actual) for item in values)


def _contains(actual: object, expected: object) -> bool:
    if isinstance(actual, str) and isinstance(expected, str):
        return expected in actual
    if isinstance(actual, list):
        return any(_same_value_zero(item, expected) for item in actual)
    return False


def _matches(actual: object, pattern: object) -> bool:
    if not (isinstance(actual, str) and isinstance(pattern, str)):
        return False
    compiled = compile_js_regex(pattern)
    return compiled is not None and compiled.search(actual) is not None


def _compare(op: typing.Callable[[Any, Any], bool]) -> typing.Callable[[object, object], bool]:
    return lambda actual, expected: (
        is_js_number(actual) and is_js_number(expected) and op(actual, expected)
    )


_OPERATORS: dict[str, typing.Callable[[object, object], bool]] = {
    "equals": strictly_equal,
    "notEquals": lambda actual, expected: not strictly_equal(actual, expected),
    "in": _included,
    "notIn": lambda actual, expected: isinstance(expected, list) and not _included(actual, expected),
    "contains": _contains,
    "matches": _matches,
    "greaterThan": _compare(lambda a, b: a > b),
    "lessThan": _compare(lambda a, b: a < b),
}

OPERATORS: frozenset[str] = frozenset(_OPERATORS)
"""Every condition operator of Hankweave 0.10.0."""


# --------------------------------------------------------------------------------------------
# JavaScript regular expressions
# --------------------------------------------------------------------------------------------

_GROUP_NAME = re.compile(r"[A-Za-z_]\w*")
# Letters JavaScript gives a meaning after a backslash (without the `u` flag); any other
# escaped letter is the letter itself there, but an error or something else in Python.
_JS_ESCAPE_LETTERS = frozenset("bBdDfnrsStvwWxuck")
_HEX = frozenset("0123456789abcdefABCDEF")


@functools.lru_cache(maxsize=256)
def compile_js_regex(pattern: str) -> re.Pattern[str] | None:
    """`pattern` as ``new RegExp(pattern)`` (no flags) would read it, or `None` if invalid.

    The translation covers where the two dialects differ in practice: ``$`` means the end of
    the input only (Python's also matches before a final newline), named groups are spelt
    ``(?<name>...)``/``\\k<name>``, ``[^]`` is any character and ``[]`` nothing, ``\\d``,
    ``\\w`` and ``\\b`` are ASCII, and an escaped letter without a meaning (``\\e``, ``\\A``)
    is the letter.  Python-only syntax (``(?P...)``, inline flags) is invalid in JavaScript,
    so it is invalid here too; so is a variable-width lookbehind, which only JavaScript has.
    """
    translated = _translate(pattern)
    if translated is None:
        return None
    try:
        with warnings.catch_warnings():
            # "Possible nested set" and friends: literal in JavaScript, fine here too.
            warnings.simplefilter("ignore", FutureWarning)
            return re.compile(translated, re.ASCII)
    except (re.error, OverflowError, RecursionError):
        return None


def _translate(pattern: str) -> str | None:
    out: list[str] = []
    i, in_class = 0, False
    while i < len(pattern):
        char = pattern[i]
        piece: str | None
        if char == "\\":
            piece, i = _escape(pattern, i)
        elif in_class:
            in_class = char != "]"
            piece, i = char, i + 1
        elif pattern.startswith("[^]", i):
            piece, i = r"[\s\S]", i + 3
        elif pattern.startswith("[]", i):
            piece, i = "(?!)", i + 2
        elif char == "[":
            in_class = True
            opening = "[^" if pattern.startswith("[^", i) else "["
            piece, i = opening, i + len(opening)
        elif char == "$":
            piece, i = r"(?!(?s:.))", i + 1
        elif pattern.startswith("(?", i):
            piece, i = _group_opening(pattern, i)
        else:
            piece, i = char, i + 1
        if piece is None:
            return None
        out.append(piece)
    return "".join(out)


def _escape(pattern: str, i: int) -> tuple[str | None, int]:
    """The escape at `i` in Python's spelling, and the index after it."""
    if i + 1 >= len(pattern):
        return None, i  # a trailing backslash
    letter = pattern[i + 1]
    if letter == "k" and pattern.startswith("\\k<", i):
        end = pattern.find(">", i)
        name = pattern[i + 3 : end] if end > 0 else ""
        return (f"(?P={name})", end + 1) if _GROUP_NAME.fullmatch(name) else (None, i)
    if letter == "c":
        control = pattern[i + 2 : i + 3]
        if control.isascii() and control.isalpha():
            return re.escape(chr(ord(control) % 32)), i + 3
        return r"\\", i + 1  # "\c" not followed by a letter is a literal backslash
    if letter in "xu":
        width = 2 if letter == "x" else 4
        digits = pattern[i + 2 : i + 2 + width]
        if len(digits) == width and set(digits) <= _HEX:
            return pattern[i : i + 2 + width], i + 2 + width
        return letter, i + 2
    if letter.isascii() and letter.isalpha() and letter not in _JS_ESCAPE_LETTERS:
        return letter, i + 2
    return pattern[i : i + 2], i + 2


def _group_opening(pattern: str, i: int) -> tuple[str | None, int]:
    """A ``(?`` group at `i`: named groups and lookarounds are JavaScript's; the rest is not."""
    for opening in ("(?:", "(?=", "(?!", "(?<=", "(?<!"):
        if pattern.startswith(opening, i):
            return opening, i + len(opening)
    if pattern.startswith("(?<", i):
        end = pattern.find(">", i)
        name = pattern[i + 3 : end] if end > 0 else ""
        if _GROUP_NAME.fullmatch(name):
            return f"(?P<{name}>", end + 1
    return None, i
