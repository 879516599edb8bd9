"""hankweave: a durable runtime for long, multi-step LLM-agent work."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from hankweave.hookspecs import hookimpl

__all__ = ["__version__", "hookimpl"]


def __getattr__(name: str) -> Any:
    # The hookimpl marker needs pluggy; load it on first use so `import hankweave` stays cheap.
    if name == "hookimpl":
        from hankweave.hookspecs import hookimpl

        return hookimpl
    raise AttributeError(f"module 'hankweave' has no attribute {name!r}")
