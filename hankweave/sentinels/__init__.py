"""Sentinels: observer LLMs (or other observers) triggered by runtime events (docs/sentinels.md).

The package is layered above the event catalogue and the plugin hooks and below the runtime:

* :mod:`~hankweave.sentinels.config`: the strict config models and their loading;
* :mod:`~hankweave.sentinels.conditions`: which events sentinels observe, condition paths
  checked against the event payloads, and conditions evaluated as the original does;
* :mod:`~hankweave.sentinels.js`: the JavaScript sandbox (V8) that sentinel code runs in;
* :mod:`~hankweave.sentinels.zod`: ``schemaStr``/``schemaFile`` run with a ``z`` that builds JSON
  Schema, and :mod:`~hankweave.sentinels.structured_output`: the schema an answer is validated
  against;
* :mod:`~hankweave.sentinels.templates`: prompt templates: Jinja2 (sandboxed), and the
  original's Eta, compiled to JavaScript by :mod:`~hankweave.sentinels.eta`;
  :mod:`~hankweave.sentinels.jsvalues` keeps JavaScript's ``===`` for conditions and
  ``JSON.stringify`` for Jinja's ``tojson``;
* :mod:`~hankweave.sentinels.triggers`: trigger matching, execution strategies and the
  per-sentinel trigger queue, pure and on the caller's clock (``hankweave.runtime.sentinels``
  drives them);
* :mod:`~hankweave.sentinels.history`: a conversational sentinel's history file per codon run,
  loaded lazily, repaired or cleared when corrupt, trimmed by its strategy, rewritten atomically;
* :mod:`~hankweave.sentinels.outputs`: the log and last-value files a sentinel writes, resolved
  from ``outputPaths`` and kept inside the execution directory or the agent root;
* :mod:`~hankweave.sentinels.llm`: the built-in ``llm`` kind, an LLM call through litellm.

The contract of trigger and kind classes is :mod:`hankweave.sentinel`; the kernel's own
(``event``, ``sequence``, ``llm``) are registered by ``hankweave.default_plugins.sentinels``.
"""
