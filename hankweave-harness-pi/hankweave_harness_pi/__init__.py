"""The pi harness for hankweave: codons on every non-Anthropic model (OpenAI, Google, Mistral,
Groq, DeepSeek, OpenRouter, local OpenAI-compatible servers), and on Anthropic models spelled
``pi/anthropic/...``, run by a pi-style coding agent on litellm.

Install it next to hankweave (``pip install hankweave-harness-pi``).  Settings: the
``harnesses.pi`` section (:class:`~hankweave_harness_pi.harness.PiConfig`); the whole story is
in hankweave's ``docs/harness-pi.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hankweave.api import lazy_exports

if TYPE_CHECKING:
    from hankweave_harness_pi.harness import PiConfig, PiHarness

# Lazy: every `hankweave` start imports the entry point, and with it this package.
__getattr__ = lazy_exports(globals(), {"PiConfig": "hankweave_harness_pi.harness",
                                       "PiHarness": "hankweave_harness_pi.harness"})

__all__ = ["PiConfig", "PiHarness"]
