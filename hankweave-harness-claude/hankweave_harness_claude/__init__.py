"""The Claude harness for hankweave: codons on Anthropic models (and Anthropic models on Amazon
Bedrock) run by the Claude Code CLI, through the Claude Agent SDK.

Install it next to hankweave (``pip install hankweave-harness-claude``); codons whose model is
an Anthropic one (``haiku``, ``sonnet``, ``opus``, ``anthropic/...``, or an ``anthropic.``
model on ``amazon-bedrock``) then run on it.  Settings: the ``harnesses.claude`` section
(:class:`~hankweave_harness_claude.harness.ClaudeConfig`); the whole story is in hankweave's
``docs/harness-claude.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hankweave.api import lazy_exports

if TYPE_CHECKING:
    from hankweave_harness_claude.harness import ClaudeConfig, ClaudeHarness

# Lazy: every `hankweave` start imports the entry point (plugin.py), and with it this package;
# the harness module (and pydantic) only when asked for.
__getattr__ = lazy_exports(globals(), {"ClaudeConfig": "hankweave_harness_claude.harness",
                                       "ClaudeHarness": "hankweave_harness_claude.harness"})

__all__ = ["ClaudeConfig", "ClaudeHarness"]
