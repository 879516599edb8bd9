"""Canonical JSON: the byte form every ``hank.lock`` hash is taken over (Hankweave 0.12).

Keys sorted by their UTF-8 bytes (not by UTF-16 units, as a JavaScript sort would), no
whitespace, strings escaped as ``JSON.stringify`` escapes them (``"``, ``\\`` and control
characters; everything else raw UTF-8). Numbers that would not survive the round trip
(``NaN``, infinities) and keys with a lone surrogate (no byte order) are refused, because a
hash preimage must mean one thing.
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

__all__ = ["CanonicalJsonError", "canonical_json", "js_number", "utf8_key"]


class CanonicalJsonError(ValueError):
    """A value has no canonical JSON form."""


def utf8_key(text: str) -> bytes:
    """The sort key of ``text``: its UTF-8 bytes (a lone surrogate has none)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise CanonicalJsonError(f"{text!r} holds a lone surrogate: it has no byte order") from None


def canonical_json(value: Any) -> str:
    """``value`` as canonical JSON text (see the module docstring)."""
    out: list[str] = []
    _emit(value, out)
    return "".join(out)


def _emit(value: Any, out: list[str]) -> None:
    if value is None or isinstance(value, bool):
        out.append(json.dumps(value))
    elif isinstance(value, str):
        utf8_key(value)
        out.append(json.dumps(value, ensure_ascii=False))
    elif isinstance(value, int):
        out.append(str(value))
    elif isinstance(value, float):
        out.append(_number(value))
    elif isinstance(value, dict):
        out.append("{")
        for index, key in enumerate(sorted(value, key=_dict_key)):
            if index:
                out.append(",")
            out.append(json.dumps(key, ensure_ascii=False))
            out.append(":")
            _emit(value[key], out)
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _emit(item, out)
        out.append("]")
    else:
        raise CanonicalJsonError(f"{type(value).__name__} has no JSON form")


def _dict_key(key: object) -> bytes:
    if not isinstance(key, str):
        raise CanonicalJsonError(f"object key {key!r} is not a string")
    return utf8_key(key)


def _number(value: float) -> str:
    if not math.isfinite(value):
        raise CanonicalJsonError(f"{value} is not a finite number")
    return js_number(value)


def js_number(value: float) -> str:
    """A finite float as JavaScript's ``Number#toString`` spells it (``5e-05`` is
    ``0.00005``, ``1e21`` is ``1e+21``, ``2.0`` is ``2``): the original hashes those."""
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    digits_tuple, exponent = Decimal(repr(abs(value))).normalize().as_tuple()[1:]
    digits = "".join(str(d) for d in digits_tuple)
    assert isinstance(exponent, int)
    k, n = len(digits), exponent + len(digits)
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + digits
    e = n - 1
    mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{sign}{mantissa}e{'+' if e > 0 else '-'}{abs(e)}"
