"""What the mock provider accepts as a request body: a JSON object of at most
:data:`MAX_BODY_BYTES` bytes, nested at most :data:`MAX_BODY_DEPTH` deep.

Anything else is refused with a :class:`BodyError` that the server turns into the protocol's
``invalid_request_error`` (400), as the real providers answer a request they cannot read.  The
depth limit matters twice: Python's JSON decoder raises ``RecursionError`` on a body nested a few
thousand levels deep (a bare 500 otherwise), and a body that parses but nests past a few hundred
levels would fail later, when the request log encodes it again.
"""

from __future__ import annotations

import json
from typing import Any

MAX_BODY_BYTES = 32 * 1024 * 1024
"""32 MiB: the Anthropic Messages API's own request limit; a long agent conversation is a few MiB."""

MAX_BODY_DEPTH = 256
"""Arrays and objects inside one another; real requests (tool schemas included) stay below 30."""


class BodyError(ValueError):
    """A body the mock provider cannot take; the message says why, for the client."""


def too_large(size: int | None = None) -> BodyError:
    """``size``: the body's length when it is known (declared or read)."""
    shown = f" ({size} bytes)" if size is not None else ""
    return BodyError(f"the request body{shown} is larger than the {MAX_BODY_BYTES} bytes the"
                     " hankweave mock provider accepts")


def parse_body(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object.

    Raises:
        BodyError: ``raw`` is too large, not UTF-8 JSON, not an object, or nested too deeply.
    """
    if len(raw) > MAX_BODY_BYTES:
        raise too_large(len(raw))
    try:
        body = json.loads(raw)
    except RecursionError:
        raise _too_deep() from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise BodyError(f"the request body is not valid JSON ({exc})") from None
    if not isinstance(body, dict):
        raise BodyError("the request body is not a JSON object")
    if _depth_exceeds(body, MAX_BODY_DEPTH):
        raise _too_deep()
    return body


def _too_deep() -> BodyError:
    return BodyError(f"the request body is nested more than {MAX_BODY_DEPTH} levels deep")


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether ``value`` nests containers more than ``limit`` deep (iteratively: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children
                     if isinstance(child, dict | list))
    return False
