"""Fakes and contract suites for testing hankweave and its plugins.

* :class:`FakeHarness` (``hankweave.testing.fake_harness``): a scripted agent, a real harness;
* :class:`MemorySink` (``hankweave.testing.sinks``) and the in-memory checkpoint backend
  (``hankweave.testing.memory_checkpoints``): real plugins that keep things in memory;
* the contract suites every implementation subclasses: :class:`HarnessContract`,
  :class:`EventSinkContract`, :class:`CheckpointStoreContract`,
  :class:`ProxyMiddlewareContract`;
* helpers: :func:`attempt_context` and :func:`run_attempt` (a harness called directly, or one
  attempt through the kernel's runner), :func:`codon_outcomes` (what a run left, per codon);
* the scripted mock provider for tests: :func:`start_mock_provider`, :func:`scripted_mock` (a
  module-scoped fixture) and :class:`MockProviderLog`
  (``hankweave.testing.mock_provider``), and the ``mock_provider`` pytest fixture
  (``pytest_plugins = ["hankweave.testing.pytest_plugin"]``).

Names resolve lazily: loading the fake harness as a plugin does not import pytest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hankweave.lazy import lazy_exports

if TYPE_CHECKING:
    from hankweave.testing.checkpoints import CheckpointStoreContract
    from hankweave.testing.fake_harness import FakeHarness, FakeScript, use_script
    from hankweave.testing.harness import (
        Arranged,
        HarnessContract,
        RecordingPolicy,
        attempt_context,
        collect,
        run_attempt,
    )
    from hankweave.testing.memory_checkpoints import MemoryCheckpointStore
    from hankweave.testing.mock_provider import (
        LoggedRequest,
        MockProviderLog,
        scripted_mock,
        start_mock_provider,
    )
    from hankweave.testing.outcomes import codon_outcomes
    from hankweave.testing.project import TEST_PLUGINS, HankProject
    from hankweave.testing.proxy import ProxyMiddlewareContract
    from hankweave.testing.sinks import EventSinkContract, MemorySink

_EXPORTS = {
    "Arranged": "harness",
    "CheckpointStoreContract": "checkpoints",
    "EventSinkContract": "sinks",
    "FakeHarness": "fake_harness",
    "FakeScript": "fake_harness",
    "HankProject": "project",
    "HarnessContract": "harness",
    "LoggedRequest": "mock_provider",
    "MemoryCheckpointStore": "memory_checkpoints",
    "MemorySink": "sinks",
    "MockProviderLog": "mock_provider",
    "ProxyMiddlewareContract": "proxy",
    "RecordingPolicy": "harness",
    "TEST_PLUGINS": "project",
    "attempt_context": "harness",
    "codon_outcomes": "outcomes",
    "collect": "harness",
    "run_attempt": "harness",
    "scripted_mock": "mock_provider",
    "start_mock_provider": "mock_provider",
    "use_script": "fake_harness",
}


__getattr__ = lazy_exports(globals(), {name: f"hankweave.testing.{module}"
                                          for name, module in _EXPORTS.items()})

__all__ = [
    "TEST_PLUGINS",
    "Arranged",
    "CheckpointStoreContract",
    "EventSinkContract",
    "FakeHarness",
    "FakeScript",
    "HankProject",
    "HarnessContract",
    "LoggedRequest",
    "MemoryCheckpointStore",
    "MemorySink",
    "MockProviderLog",
    "ProxyMiddlewareContract",
    "RecordingPolicy",
    "attempt_context",
    "codon_outcomes",
    "collect",
    "run_attempt",
    "scripted_mock",
    "start_mock_provider",
    "use_script",
]
