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
from typing import Any

__all__ = ["CanonicalJsonError", "canonical_json", "utf8_key"]


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
    return "".join(_parts(value))


def _parts(value: Any) -> list[str]:
    out: list[str] = []
    _emit(value, out)
    return out


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
    """A float as JavaScript's ``Number#toString`` spells it (the original hashes those)."""
    if not math.isfinite(value):
        raise CanonicalJsonError(f"{value} is not a finite number")
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    if "e" in text:  # 1e-07 -> 1e-7, 1e+21 stays
        mantissa, exponent = text.split("e")
        sign = "-" if exponent.startswith("-") else "+"
        text = f"{mantissa}e{sign}{exponent.lstrip('+-').lstrip('0') or '0'}"
    return text
