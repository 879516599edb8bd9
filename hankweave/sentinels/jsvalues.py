"""The JavaScript value semantics Python code of the sentinels keeps: a trigger condition's
``===`` (:mod:`.conditions`, evaluated per event, so in Python, not in the sandbox) and the
``tojson`` filter of Jinja prompts (``JSON.stringify``'s output).  Eta templates and Zod
schemas run as JavaScript itself (:mod:`.js`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

__all__ = [
    "JS_UNDEFINED",
    "is_js_number",
    "js_nullish",
    "js_number_str",
    "js_str",
    "js_strict_equal",
    "js_stringify",
]


class _Undefined:
    """JavaScript's ``undefined``: what a missing key or index reads as."""

    _instance: _Undefined | None = None

    def __new__(cls) -> _Undefined:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "undefined"


JS_UNDEFINED = _Undefined()


def js_nullish(value: Any) -> bool:
    """Whether ``value`` is ``null`` or ``undefined``, the left side ``??`` replaces."""
    return value is None or value is JS_UNDEFINED


def is_js_number(value: Any) -> bool:
    """Whether ``value`` is a JavaScript number (``bool`` is an ``int`` in Python, not here)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def js_strict_equal(a: Any, b: Any) -> bool:
    """JavaScript ``a === b``: numbers by value (NaN is not NaN), ``true`` is not ``1``, objects
    and arrays only when they are the same object."""
    if is_js_number(a) and is_js_number(b):
        return bool(a == b)
    if isinstance(a, Mapping | list | tuple) or isinstance(b, Mapping | list | tuple):
        return a is b
    return type(a) is type(b) and a == b


def _is_array(value: Any) -> bool:
    return isinstance(value, list | tuple)


def js_number_str(number: float) -> str:
    """``String(number)``: integral values without ``.0``, exponents only outside 1e-7..1e21."""
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "Infinity" if number > 0 else "-Infinity"
    if isinstance(number, int):
        return str(number)
    if number.is_integer() and abs(number) < 1e21:
        return str(int(number))
    text = repr(number)
    if "e" not in text:
        return text
    mantissa, exponent = text.split("e")
    power = int(exponent)
    if -7 < power < 21:
        return format(Decimal(text), "f")
    return f"{mantissa}e{'+' if power > 0 else '-'}{abs(power)}"


def _iso(moment: datetime) -> str:
    """``Date.prototype.toISOString``: UTC, milliseconds, ``Z``."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def js_str(value: Any) -> str:
    """``String(value)``, which is what ``<%= value %>`` writes (``autoEscape`` is off).

    A datetime prints as its ISO form: JavaScript's ``Date.toString()`` depends on the host's
    locale and time zone, which a prompt should not."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if value is JS_UNDEFINED:
        return "undefined"
    if is_js_number(value):
        return js_number_str(value)
    if _is_array(value):
        return ",".join("" if item is None or item is JS_UNDEFINED else js_str(item)
                        for item in value)
    if isinstance(value, datetime):
        return _iso(value)
    if isinstance(value, Mapping):
        return "[object Object]"
    return str(value)


def _normalize_for_json(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {js_str(key): _normalize_for_json(item) for key, item in value.items()
                if item is not JS_UNDEFINED and not callable(item)}
    if _is_array(value):
        return [None if item is JS_UNDEFINED or callable(item) else _normalize_for_json(item)
                for item in value]
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return None
        return int(value) if value.is_integer() and abs(value) < 1e21 else value
    if isinstance(value, datetime):
        return _iso(value)
    if value is None or isinstance(value, str | bool | int):
        return value
    return js_str(value)


def js_stringify(value: Any, indent: Any = None) -> Any:
    """``JSON.stringify(value)`` / ``JSON.stringify(value, null, indent)``: key order kept,
    non-ASCII kept, integral floats without ``.0``; ``undefined`` in, ``undefined`` out."""
    if value is JS_UNDEFINED or callable(value):
        return JS_UNDEFINED
    if isinstance(indent, str):
        spacing: str | int | None = indent[:10] or None
    elif is_js_number(indent) and indent >= 1:
        spacing = min(int(indent), 10)  # JavaScript caps the indent at 10
    else:
        spacing = None
    separators = (",", ": ") if spacing is not None else (",", ":")
    return json.dumps(_normalize_for_json(value), ensure_ascii=False, indent=spacing,
                      separators=separators)
