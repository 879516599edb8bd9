"""JavaScript value semantics for Eta templates translated to Jinja2 (:mod:`.eta`).

Eta templates are JavaScript: ``<%= it.codon.description || 'none' %>`` relies on a missing
key being ``undefined``, on ``[]`` being truthy and on ``String(true)`` being ``"true"``. The
translation keeps those meanings by routing every member access, operator and method call of
the supported subset through these helpers, which the sandboxed Jinja environment exposes as
``js_*`` globals. Values are the JSON-like data of the template context (dicts, lists, strings,
numbers, booleans, ``None``) plus :class:`~datetime.datetime`; nothing here reads a Python
attribute, so a template cannot reach one through a translated expression.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

__all__ = [
    "JS_UNDEFINED",
    "METHODS",
    "is_js_number",
    "js_iter",
    "js_member",
    "js_method",
    "js_nullish",
    "js_op",
    "js_str",
    "js_strict_equal",
    "js_stringify",
    "js_truthy",
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

JSCallback = Callable[..., Any]


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


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if value is JS_UNDEFINED:
        return "undefined"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if is_js_number(value):
        return "number"
    return "array" if _is_array(value) else "object"


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


def js_truthy(value: Any) -> bool:
    """JavaScript truthiness: empty arrays and objects are true, ``0``, ``""`` and NaN false."""
    if value is None or value is JS_UNDEFINED or value is False:
        return False
    if isinstance(value, str):
        return value != ""
    if is_js_number(value):
        return value != 0 and not math.isnan(value)
    return True


def _utf16_length(text: str) -> int:
    # JavaScript strings count UTF-16 code units: an emoji is 2 long.
    return len(text.encode("utf-16-le")) // 2


def _array_index(key: Any) -> int | None:
    if isinstance(key, bool):
        return None
    if isinstance(key, int):
        return key
    if isinstance(key, float) and key.is_integer():
        return int(key)
    if isinstance(key, str) and key.isdigit():
        return int(key)
    return None


def js_member(value: Any, key: Any, optional: bool = False) -> Any:
    """``value[key]`` / ``value.key`` (``value?.key`` when ``optional``): a missing key or index
    is ``undefined``; reading from ``null`` or ``undefined`` is the JavaScript TypeError."""
    if value is None or value is JS_UNDEFINED:
        if optional:
            return JS_UNDEFINED
        raise TypeError(f"cannot read properties of {_type_name(value)} "
                        f"(reading {js_str(key)!r})")
    if isinstance(value, str | list | tuple):
        if key == "length":
            return _utf16_length(value) if isinstance(value, str) else len(value)
        index = _array_index(key)
        return value[index] if index is not None and 0 <= index < len(value) else JS_UNDEFINED
    if isinstance(value, Mapping):
        name = key if isinstance(key, str) else js_str(key)
        return value.get(name, JS_UNDEFINED)
    return JS_UNDEFINED


def js_iter(value: Any) -> Sequence[Any]:
    """What ``for (const x of value)`` and ``value.forEach`` walk: arrays and strings only."""
    if isinstance(value, str | list | tuple):
        return value
    raise TypeError(f"{_type_name(value)} is not iterable")


def _to_number(value: Any) -> float:
    if isinstance(value, bool):
        return int(value)
    if is_js_number(value):
        return value
    if value is None:
        return 0
    if isinstance(value, str):
        try:
            return float(value.strip()) if value.strip() else 0
        except ValueError:
            return math.nan
    return math.nan


def _divide(left: float, right: float) -> float:
    if right == 0:
        if left == 0 or math.isnan(left):
            return math.nan
        return math.copysign(math.inf, left) * math.copysign(1, right)
    return left / right


def _add(left: Any, right: Any) -> Any:
    # ``+`` concatenates as soon as either side is not a number-like primitive.
    numeric = (bool, int, float, type(None), _Undefined)
    if isinstance(left, numeric) and isinstance(right, numeric):
        return _to_number(left) + _to_number(right)
    return js_str(left) + js_str(right)


_ARITHMETIC: dict[str, Callable[[float, float], float]] = {
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": _divide,
    "%": lambda a, b: math.nan if b == 0 else math.fmod(a, b),
}


def js_op(operator: str, left: Any, right: Any) -> Any:
    """The arithmetic operators ``+ - * / %`` with JavaScript coercions (no ZeroDivisionError)."""
    if operator == "+":
        return _add(left, right)
    return _ARITHMETIC[operator](_to_number(left), _to_number(right))


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


def _string_only(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    def call(receiver: Any, *args: Any) -> Any:
        if not isinstance(receiver, str):
            raise TypeError(f"{_type_name(receiver)}.{name} is not a function")
        return method(receiver, *args)
    return call


def _array_only(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    def call(receiver: Any, *args: Any) -> Any:
        if not _is_array(receiver):
            raise TypeError(f"{_type_name(receiver)}.{name} is not a function")
        return method(list(receiver), *args)
    return call


def _to_fixed(receiver: Any, digits: Any = 0) -> str:
    if not is_js_number(receiver):
        raise TypeError(f"{_type_name(receiver)}.toFixed is not a function")
    if math.isnan(receiver) or math.isinf(receiver):
        return js_number_str(receiver)
    # JavaScript rounds an exact tie away from zero; Python's format rounds it to even.
    quantum = Decimal(1).scaleb(-int(digits))
    return str(Decimal(receiver).quantize(quantum, rounding=ROUND_HALF_UP))


def _slice(receiver: Any, start: Any = 0, end: Any = None) -> Any:
    if not isinstance(receiver, str | list | tuple):
        raise TypeError(f"{_type_name(receiver)}.slice is not a function")
    return receiver[int(start): None if end is None else int(end)]


def _substring(receiver: str, start: Any = 0, end: Any = None) -> str:
    low = max(0, int(start))
    high = len(receiver) if end is None else max(0, int(end))
    return receiver[min(low, high): max(low, high)]


def _includes(receiver: Any, needle: Any) -> bool:
    if isinstance(receiver, str):
        return js_str(needle) in receiver
    if _is_array(receiver):
        return any(item == needle for item in receiver)
    raise TypeError(f"{_type_name(receiver)}.includes is not a function")


def _index_of(receiver: Any, needle: Any) -> int:
    if isinstance(receiver, str):
        return receiver.find(js_str(needle))
    if _is_array(receiver):
        return next((index for index, item in enumerate(receiver) if item == needle), -1)
    raise TypeError(f"{_type_name(receiver)}.indexOf is not a function")


def _join(items: list[Any], separator: Any = ",") -> str:
    return js_str(separator).join("" if item is None or item is JS_UNDEFINED else js_str(item)
                                  for item in items)


def _split(receiver: str, separator: Any = JS_UNDEFINED) -> list[str]:
    if separator is JS_UNDEFINED:
        return [receiver]
    text = js_str(separator)
    return list(receiver) if text == "" else receiver.split(text)


def _to_iso_string(receiver: Any) -> str:
    if not isinstance(receiver, datetime):
        raise TypeError(f"{_type_name(receiver)}.toISOString is not a function")
    return _iso(receiver)


def _find(items: list[Any], callback: JSCallback) -> Any:
    return next((item for index, item in enumerate(items) if js_truthy(callback(item, index))),
                JS_UNDEFINED)


def _find_index(items: list[Any], callback: JSCallback) -> int:
    return next((index for index, item in enumerate(items)
                 if js_truthy(callback(item, index))), -1)


METHODS: dict[str, Callable[..., Any]] = {
    "toFixed": _to_fixed,
    "toString": lambda receiver: js_str(receiver),
    "toISOString": _to_iso_string,
    "toUpperCase": _string_only("toUpperCase", str.upper),
    "toLowerCase": _string_only("toLowerCase", str.lower),
    "trim": _string_only("trim", str.strip),
    "startsWith": _string_only("startsWith", lambda s, x: s.startswith(js_str(x))),
    "endsWith": _string_only("endsWith", lambda s, x: s.endswith(js_str(x))),
    "split": _string_only("split", _split),
    "substring": _string_only("substring", _substring),
    "slice": _slice,
    "includes": _includes,
    "indexOf": _index_of,
    "join": _array_only("join", _join),
    "filter": _array_only("filter", lambda items, fn: [
        item for index, item in enumerate(items) if js_truthy(fn(item, index))]),
    "map": _array_only("map", lambda items, fn: [
        fn(item, index) for index, item in enumerate(items)]),
    "some": _array_only("some", lambda items, fn: any(
        js_truthy(fn(item, index)) for index, item in enumerate(items))),
    "every": _array_only("every", lambda items, fn: all(
        js_truthy(fn(item, index)) for index, item in enumerate(items))),
    "find": _array_only("find", _find),
    "findIndex": _array_only("findIndex", _find_index),
}
"""The methods a translated Eta expression may call, by JavaScript name."""


def js_method(receiver: Any, name: str, *args: Any) -> Any:
    """``receiver.name(...args)`` for a method in :data:`METHODS`."""
    if receiver is None or receiver is JS_UNDEFINED:
        raise TypeError(f"cannot read properties of {_type_name(receiver)} (reading {name!r})")
    return METHODS[name](receiver, *args)
