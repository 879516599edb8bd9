"""The public kernel API: everything a plugin may import from hankweave, in one module.

Sibling packages (harnesses, checkpoint backends, sinks, replay, executors) import from here and
from nowhere else in the kernel; their tests may also use :mod:`hankweave.testing`.  Every other
module of the kernel is internal and free to change.  A test enforces the rule
(``tests/test_layers.py``); ``docs/api.md`` describes each name.

Names resolve lazily, so a plugin that imports this module at start-up (every installed plugin
is imported when ``hankweave`` starts, ``--help`` included) pays only for what it uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hankweave.lazy import lazy_exports

if TYPE_CHECKING:
    from hankweave import __version__, hookimpl
    from hankweave.app.answers import AnswerError, GivenAnswer, RecordedAnswer, answer_interruption
    from hankweave.app.launch import LaunchError, LaunchRequest, launch, prepare, warm_up
    from hankweave.app.playback import REPLAY_HARNESS, Playback
    from hankweave.app.stop_latch import StopLatch
    from hankweave.checkpoints import (
        AmbiguousCheckpointError,
        BackendNotInstalledError,
        Checkpoint,
        CheckpointError,
        CheckpointKind,
        CheckpointNotFoundError,
        CheckpointStorageError,
        CheckpointStore,
        FileChange,
        RetentionPolicy,
        checkpoint_message,
        run_branch,
    )
    from hankweave.cli.errors import CLIError
    from hankweave.codonlog import (
        CodonLogParser,
        LogLine,
        LogModel,
        LogReadReport,
        UnknownRecord,
        assistant_record,
        assistant_text,
        assistant_tool_use,
        catalogue_price,
        compact_boundary_record,
        error_result,
        init_record,
        parse_record,
        read_log,
        result_record,
        summarize_log,
        text_block,
        thinking_block,
        tool_result_record,
        tool_use_block,
    )
    from hankweave.config.errors import ConfigError
    from hankweave.config.hank import HankFile, base_codon_id, load_hank, runtime_codon_id
    from hankweave.config.settings import RUNTIME_CONFIG_FILE, load_runtime_config, resolve_settings
    from hankweave.events.catalogue import ServerEvent
    from hankweave.events.journal import JournalReadReport, journal_last_seq, read_journal
    from hankweave.events.sink import (
        EventSink,
        SentinelAnswer,
        SentinelError,
        SentinelFatalError,
        SentinelFiring,
        SentinelKind,
        SentinelOptions,
        SentinelSetup,
        SentinelTrigger,
        SinkConfig,
    )
    from hankweave.execution.document import ExecutionDocument, document_of
    from hankweave.execution.layout import ExecutionLayout, codon_log_name
    from hankweave.execution.meta import ExecutionMetaError, load_execution_meta
    from hankweave.execution.setup import managed_executions_root
    from hankweave.exitcodes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
    from hankweave.faults import kill_point
    from hankweave.fsutil import (
        atomic_write_bytes,
        fsync_dir,
        parse_iso,
        pid_alive,
        process_running,
        utc_now_iso,
    )
    from hankweave.harness import (
        NO_HUMAN_MESSAGE,
        AgentStartError,
        AttemptContext,
        AttemptPolicy,
        CodonLogRecord,
        CodonRequest,
        Harness,
        HarnessConfig,
        HarnessNotInstalledError,
        HarnessSelectionError,
        HumanReply,
        StderrLog,
        ToolDecision,
    )
    from hankweave.lazy import lazy_exports
    from hankweave.models import (
        CatalogueSnapshot,
        ModelCost,
        ModelEntry,
        ProviderEntry,
        UnknownModelError,
    )
    from hankweave.plugins import make_plugin_manager
    from hankweave.processes import (
        AGENT_MARKER_ENV,
        end_processes,
        end_processes_now,
        marked_processes,
    )
    from hankweave.providers import CredentialsError, ProviderOptions, Route, route
    from hankweave.registry import Registry, get_registry
    from hankweave.runtime.budget_report import RecordedLimits, budget_report, read_recorded_limits
    from hankweave.runtime.planner import checkpoint_patterns_through, expected_codon_ids
    from hankweave.server.client import (
        CommandReply,
        ControlClient,
        ControlRefusedError,
        NoServerError,
        ServerAddress,
        server_address,
    )
    from hankweave.state.costs import codon_cost, codon_cost_complete, codon_tokens, total_cost
    from hankweave.state.lock import (
        LockCorruptError,
        LockError,
        LockInfo,
        live_runtime_lock,
        this_host,
    )
    from hankweave.state.store import StateLoadError, load_state, read_state_strict
    from hankweave.state.thread import ExecutionThread, analyze_execution_thread
    from hankweave.state.types import (
        CodonExecution,
        HankweaveState,
        TokenUsage,
        dump_state,
        end_checkpoint,
        record_checkpoints,
    )
    from hankweave.workspace import DATA_LINK, glob_regex, resolve_patterns

_EXPORTS: dict[str, str] = {
    # plugins
    "__version__": "hankweave",
    "hookimpl": "hankweave",
    "make_plugin_manager": "hankweave.plugins",
    "Registry": "hankweave.registry",
    "get_registry": "hankweave.registry",
    # the harness contract
    "AgentStartError": "hankweave.harness",
    "AttemptContext": "hankweave.harness",
    "AttemptPolicy": "hankweave.harness",
    "CodonLogRecord": "hankweave.harness",
    "CodonRequest": "hankweave.harness",
    "Harness": "hankweave.harness",
    "HarnessConfig": "hankweave.harness",
    "HarnessNotInstalledError": "hankweave.harness",
    "HarnessSelectionError": "hankweave.harness",
    "HumanReply": "hankweave.harness",
    "NO_HUMAN_MESSAGE": "hankweave.harness",
    "StderrLog": "hankweave.harness",
    "ToolDecision": "hankweave.harness",
    # codon logs: the records a harness yields, and reading them back
    "CodonLogParser": "hankweave.codonlog",
    "LogLine": "hankweave.codonlog",
    "LogModel": "hankweave.codonlog",
    "LogReadReport": "hankweave.codonlog",
    "UnknownRecord": "hankweave.codonlog",
    "assistant_record": "hankweave.codonlog",
    "assistant_text": "hankweave.codonlog",
    "assistant_tool_use": "hankweave.codonlog",
    "catalogue_price": "hankweave.codonlog",
    "compact_boundary_record": "hankweave.codonlog",
    "error_result": "hankweave.codonlog",
    "init_record": "hankweave.codonlog",
    "parse_record": "hankweave.codonlog",
    "read_log": "hankweave.codonlog",
    "result_record": "hankweave.codonlog",
    "summarize_log": "hankweave.codonlog",
    "text_block": "hankweave.codonlog",
    "thinking_block": "hankweave.codonlog",
    "tool_result_record": "hankweave.codonlog",
    "tool_use_block": "hankweave.codonlog",
    # models
    "CatalogueSnapshot": "hankweave.models",
    "ModelCost": "hankweave.models",
    "ModelEntry": "hankweave.models",
    "ProviderEntry": "hankweave.models",
    "UnknownModelError": "hankweave.models",
    # checkpoint backends
    "AmbiguousCheckpointError": "hankweave.checkpoints",
    "BackendNotInstalledError": "hankweave.checkpoints",
    "Checkpoint": "hankweave.checkpoints",
    "CheckpointError": "hankweave.checkpoints",
    "CheckpointKind": "hankweave.checkpoints",
    "CheckpointNotFoundError": "hankweave.checkpoints",
    "CheckpointStorageError": "hankweave.checkpoints",
    "CheckpointStore": "hankweave.checkpoints",
    "FileChange": "hankweave.checkpoints",
    "RetentionPolicy": "hankweave.checkpoints",
    "checkpoint_message": "hankweave.checkpoints",
    "run_branch": "hankweave.checkpoints",
    "DATA_LINK": "hankweave.workspace",
    "glob_regex": "hankweave.workspace",
    "resolve_patterns": "hankweave.workspace",
    # events
    "EventSink": "hankweave.events.sink",
    "SentinelAnswer": "hankweave.events.sink",
    "SentinelError": "hankweave.events.sink",
    "SentinelFatalError": "hankweave.events.sink",
    "SentinelFiring": "hankweave.events.sink",
    "SentinelKind": "hankweave.events.sink",
    "SentinelOptions": "hankweave.events.sink",
    "SentinelSetup": "hankweave.events.sink",
    "SentinelTrigger": "hankweave.events.sink",
    "SinkConfig": "hankweave.events.sink",
    "ServerEvent": "hankweave.events.catalogue",
    "read_journal": "hankweave.events.journal",
    "journal_last_seq": "hankweave.events.journal",
    "JournalReadReport": "hankweave.events.journal",
    # an execution directory, its state and the execution thread (reading)
    "ExecutionLayout": "hankweave.execution.layout",
    "codon_log_name": "hankweave.execution.layout",
    "ExecutionMetaError": "hankweave.execution.meta",
    "load_execution_meta": "hankweave.execution.meta",
    "managed_executions_root": "hankweave.execution.setup",
    "CodonExecution": "hankweave.state.types",
    "HankweaveState": "hankweave.state.types",
    "TokenUsage": "hankweave.state.types",
    "dump_state": "hankweave.state.types",
    "end_checkpoint": "hankweave.state.types",
    "record_checkpoints": "hankweave.state.types",
    "StateLoadError": "hankweave.state.store",
    "load_state": "hankweave.state.store",
    "read_state_strict": "hankweave.state.store",
    "ExecutionDocument": "hankweave.execution.document",
    "document_of": "hankweave.execution.document",
    "ExecutionThread": "hankweave.state.thread",
    "analyze_execution_thread": "hankweave.state.thread",
    "codon_cost": "hankweave.state.costs",
    "codon_cost_complete": "hankweave.state.costs",
    "codon_tokens": "hankweave.state.costs",
    "total_cost": "hankweave.state.costs",
    # lock liveness: is a runtime using an execution directory?
    "LockCorruptError": "hankweave.state.lock",
    "LockInfo": "hankweave.state.lock",
    "LockError": "hankweave.state.lock",
    "live_runtime_lock": "hankweave.state.lock",
    "this_host": "hankweave.state.lock",
    # a running execution's live-control server (WebSocket)
    "CommandReply": "hankweave.server.client",
    "ControlClient": "hankweave.server.client",
    "ControlRefusedError": "hankweave.server.client",
    "NoServerError": "hankweave.server.client",
    "ServerAddress": "hankweave.server.client",
    "server_address": "hankweave.server.client",
    # interruptions: answering one
    "AnswerError": "hankweave.app.answers",
    "GivenAnswer": "hankweave.app.answers",
    "RecordedAnswer": "hankweave.app.answers",
    "answer_interruption": "hankweave.app.answers",
    # budgets: limits against spending
    "RecordedLimits": "hankweave.runtime.budget_report",
    "budget_report": "hankweave.runtime.budget_report",
    "read_recorded_limits": "hankweave.runtime.budget_report",
    # durable file writing
    "atomic_write_bytes": "hankweave.fsutil",
    "fsync_dir": "hankweave.fsutil",
    "parse_iso": "hankweave.fsutil",
    "pid_alive": "hankweave.fsutil",
    "process_running": "hankweave.fsutil",
    "utc_now_iso": "hankweave.fsutil",
    # test-only kill points (docs/crash-testing.md)
    "kill_point": "hankweave.faults",
    # agent processes: the marker they carry, ending them
    "AGENT_MARKER_ENV": "hankweave.processes",
    "end_processes": "hankweave.processes",
    "end_processes_now": "hankweave.processes",
    "marked_processes": "hankweave.processes",
    # litellm routes and credentials (the pi harness; the sentinels use the same)
    "CredentialsError": "hankweave.providers",
    "ProviderOptions": "hankweave.providers",
    "Route": "hankweave.providers",
    "route": "hankweave.providers",
    # hanks, settings and plans
    "ConfigError": "hankweave.config.errors",
    "HankFile": "hankweave.config.hank",
    "base_codon_id": "hankweave.config.hank",
    "load_hank": "hankweave.config.hank",
    "runtime_codon_id": "hankweave.config.hank",
    "resolve_settings": "hankweave.config.settings",
    "load_runtime_config": "hankweave.config.settings",
    "RUNTIME_CONFIG_FILE": "hankweave.config.settings",
    "checkpoint_patterns_through": "hankweave.runtime.planner",
    "expected_codon_ids": "hankweave.runtime.planner",
    # running a hank, and commands
    "LaunchError": "hankweave.app.launch",
    "LaunchRequest": "hankweave.app.launch",
    "Playback": "hankweave.app.playback",
    "REPLAY_HARNESS": "hankweave.app.playback",
    "launch": "hankweave.app.launch",
    "prepare": "hankweave.app.launch",
    "warm_up": "hankweave.app.launch",
    "StopLatch": "hankweave.app.stop_latch",
    "EXIT_FAILED": "hankweave.exitcodes",
    "EXIT_INTERRUPTED": "hankweave.exitcodes",
    "EXIT_OK": "hankweave.exitcodes",
    "EXIT_USAGE": "hankweave.exitcodes",
    "CLIError": "hankweave.cli.errors",
    # a package's lazy exports (PEP 562), as this module does it
    "lazy_exports": "hankweave.lazy",
}


__getattr__ = lazy_exports(globals(), _EXPORTS)


def __dir__() -> list[str]:
    return sorted(_EXPORTS)


__all__ = [
    "AGENT_MARKER_ENV",
    "DATA_LINK",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "NO_HUMAN_MESSAGE",
    "REPLAY_HARNESS",
    "RUNTIME_CONFIG_FILE",
    "AgentStartError",
    "AmbiguousCheckpointError",
    "AnswerError",
    "AttemptContext",
    "AttemptPolicy",
    "BackendNotInstalledError",
    "CLIError",
    "CatalogueSnapshot",
    "Checkpoint",
    "CheckpointError",
    "CheckpointKind",
    "CheckpointNotFoundError",
    "CheckpointStorageError",
    "CheckpointStore",
    "CodonExecution",
    "CodonLogParser",
    "CodonLogRecord",
    "CodonRequest",
    "CommandReply",
    "ConfigError",
    "ControlClient",
    "ControlRefusedError",
    "CredentialsError",
    "EventSink",
    "ExecutionDocument",
    "ExecutionLayout",
    "ExecutionMetaError",
    "ExecutionThread",
    "FileChange",
    "GivenAnswer",
    "HankFile",
    "HankweaveState",
    "Harness",
    "HarnessConfig",
    "HarnessNotInstalledError",
    "HarnessSelectionError",
    "HumanReply",
    "JournalReadReport",
    "LaunchError",
    "LaunchRequest",
    "LockCorruptError",
    "LockError",
    "LockInfo",
    "LogLine",
    "LogModel",
    "LogReadReport",
    "ModelCost",
    "ModelEntry",
    "NoServerError",
    "Playback",
    "ProviderEntry",
    "ProviderOptions",
    "RecordedAnswer",
    "RecordedLimits",
    "Registry",
    "RetentionPolicy",
    "Route",
    "SentinelAnswer",
    "SentinelError",
    "SentinelFatalError",
    "SentinelFiring",
    "SentinelKind",
    "SentinelOptions",
    "SentinelSetup",
    "SentinelTrigger",
    "ServerAddress",
    "ServerEvent",
    "SinkConfig",
    "StateLoadError",
    "StderrLog",
    "StopLatch",
    "TokenUsage",
    "ToolDecision",
    "UnknownModelError",
    "UnknownRecord",
    "__version__",
    "analyze_execution_thread",
    "answer_interruption",
    "assistant_record",
    "assistant_text",
    "assistant_tool_use",
    "atomic_write_bytes",
    "base_codon_id",
    "budget_report",
    "catalogue_price",
    "checkpoint_message",
    "checkpoint_patterns_through",
    "codon_cost",
    "codon_cost_complete",
    "codon_log_name",
    "codon_tokens",
    "compact_boundary_record",
    "document_of",
    "dump_state",
    "end_checkpoint",
    "end_processes",
    "end_processes_now",
    "error_result",
    "expected_codon_ids",
    "fsync_dir",
    "get_registry",
    "glob_regex",
    "hookimpl",
    "init_record",
    "journal_last_seq",
    "kill_point",
    "launch",
    "lazy_exports",
    "live_runtime_lock",
    "load_execution_meta",
    "load_hank",
    "load_runtime_config",
    "load_state",
    "make_plugin_manager",
    "managed_executions_root",
    "marked_processes",
    "parse_iso",
    "parse_record",
    "pid_alive",
    "prepare",
    "process_running",
    "read_journal",
    "read_log",
    "read_recorded_limits",
    "read_state_strict",
    "record_checkpoints",
    "resolve_patterns",
    "resolve_settings",
    "result_record",
    "route",
    "run_branch",
    "runtime_codon_id",
    "server_address",
    "summarize_log",
    "text_block",
    "thinking_block",
    "this_host",
    "tool_result_record",
    "tool_use_block",
    "total_cost",
    "utc_now_iso",
    "warm_up",
]
