"""The public kernel API: everything a plugin may import from hankweave, in one module.

Sibling packages (harnesses, checkpoint backends, sinks, replay, executors) import from here and
from nowhere else in the kernel; their tests may also use :mod:`hankweave.testing`.  Every other
module of the kernel is internal and free to change.  A test enforces the rule
(``tests/test_layers.py``); ``docs/api.md`` describes each name.

The ``if TYPE_CHECKING:`` block below is the one list of public names, one
``from module import name as name`` line each (``as name`` marks it public for mypy --strict
and pyright).  Type checkers read it and see each name's real type, and an unknown name is an
error.  At run time nothing in it is imported: :func:`hankweave.lazy.lazy_facade` reads the same
lines on the first attribute lookup and imports each name's module when the name is first used,
so a plugin that imports this module at start-up (every installed plugin is imported when
``hankweave`` starts, ``--help`` included) pays only for what it uses.  ``__all__`` and
``dir()`` come from the same lines.  Adding a public name is adding one line
(docs/api.md, "How to add a public name").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hankweave import __version__ as __version__
    from hankweave import hookimpl as hookimpl
    from hankweave.app.answers import AnswerError as AnswerError
    from hankweave.app.answers import GivenAnswer as GivenAnswer
    from hankweave.app.answers import RecordedAnswer as RecordedAnswer
    from hankweave.app.answers import answer_interruption as answer_interruption
    from hankweave.app.compare import CompareError as CompareError
    from hankweave.app.compare import Comparison as Comparison
    from hankweave.app.compare import compare_executions as compare_executions
    from hankweave.app.fork import ForkError as ForkError
    from hankweave.app.fork import ForkResult as ForkResult
    from hankweave.app.fork import fork_execution as fork_execution
    from hankweave.app.launch import launch as launch
    from hankweave.app.launch import prepare as prepare
    from hankweave.app.launch import warm_up as warm_up
    from hankweave.app.playback import REPLAY_HARNESS as REPLAY_HARNESS
    from hankweave.app.playback import Playback as Playback
    from hankweave.app.request import LaunchError as LaunchError
    from hankweave.app.request import LaunchRequest as LaunchRequest
    from hankweave.app.stop_latch import StopLatch as StopLatch
    from hankweave.bundle.pack import PackResult as PackResult
    from hankweave.bundle.pack import pack_hank as pack_hank
    from hankweave.checkpoints import AmbiguousCheckpointError as AmbiguousCheckpointError
    from hankweave.checkpoints import BackendNotInstalledError as BackendNotInstalledError
    from hankweave.checkpoints import ChangeHint as ChangeHint
    from hankweave.checkpoints import Checkpoint as Checkpoint
    from hankweave.checkpoints import CheckpointError as CheckpointError
    from hankweave.checkpoints import CheckpointKind as CheckpointKind
    from hankweave.checkpoints import CheckpointNotFoundError as CheckpointNotFoundError
    from hankweave.checkpoints import CheckpointStorageError as CheckpointStorageError
    from hankweave.checkpoints import CheckpointStore as CheckpointStore
    from hankweave.checkpoints import FileChange as FileChange
    from hankweave.checkpoints import RetentionPolicy as RetentionPolicy
    from hankweave.checkpoints import StoredFile as StoredFile
    from hankweave.checkpoints import checkpoint_message as checkpoint_message
    from hankweave.checkpoints import run_branch as run_branch
    from hankweave.cli.errors import CLIError as CLIError
    from hankweave.cli.tables import FitTable as FitTable
    from hankweave.cli.tables import TableColumn as TableColumn
    from hankweave.codonlog import TURN_LIMIT_SUBTYPE as TURN_LIMIT_SUBTYPE
    from hankweave.codonlog import CodonLogParser as CodonLogParser
    from hankweave.codonlog import LogLine as LogLine
    from hankweave.codonlog import LogModel as LogModel
    from hankweave.codonlog import LogReadReport as LogReadReport
    from hankweave.codonlog import UnknownRecord as UnknownRecord
    from hankweave.codonlog import assistant_record as assistant_record
    from hankweave.codonlog import assistant_text as assistant_text
    from hankweave.codonlog import assistant_tool_use as assistant_tool_use
    from hankweave.codonlog import catalogue_price as catalogue_price
    from hankweave.codonlog import compact_boundary_record as compact_boundary_record
    from hankweave.codonlog import error_result as error_result
    from hankweave.codonlog import init_record as init_record
    from hankweave.codonlog import parse_record as parse_record
    from hankweave.codonlog import read_log as read_log
    from hankweave.codonlog import result_record as result_record
    from hankweave.codonlog import summarize_log as summarize_log
    from hankweave.codonlog import text_block as text_block
    from hankweave.codonlog import thinking_block as thinking_block
    from hankweave.codonlog import tool_result_record as tool_result_record
    from hankweave.codonlog import tool_use_block as tool_use_block
    from hankweave.config.errors import ConfigError as ConfigError
    from hankweave.config.hank import HankFile as HankFile
    from hankweave.config.hank import base_codon_id as base_codon_id
    from hankweave.config.hank import load_hank as load_hank
    from hankweave.config.hank import runtime_codon_id as runtime_codon_id
    from hankweave.config.settings import RUNTIME_CONFIG_FILE as RUNTIME_CONFIG_FILE
    from hankweave.config.settings import hankweave_passthrough as hankweave_passthrough
    from hankweave.config.settings import load_runtime_config as load_runtime_config
    from hankweave.config.settings import resolve_settings as resolve_settings
    from hankweave.events.catalogue import AssistantActionData as AssistantActionData
    from hankweave.events.catalogue import CodonCompletedData as CodonCompletedData
    from hankweave.events.catalogue import CodonExtendedData as CodonExtendedData
    from hankweave.events.catalogue import CodonStartedData as CodonStartedData
    from hankweave.events.catalogue import RunCrashedData as RunCrashedData
    from hankweave.events.catalogue import SentinelErrorData as SentinelErrorData
    from hankweave.events.catalogue import SentinelOutputData as SentinelOutputData
    from hankweave.events.catalogue import SentinelTriggeredData as SentinelTriggeredData
    from hankweave.events.catalogue import ServerEvent as ServerEvent
    from hankweave.events.catalogue import StateTransitionData as StateTransitionData
    from hankweave.events.catalogue import TokenUsageData as TokenUsageData
    from hankweave.events.catalogue import ToolResultData as ToolResultData
    from hankweave.events.journal import JournalReadReport as JournalReadReport
    from hankweave.events.journal import journal_last_seq as journal_last_seq
    from hankweave.events.journal import read_journal as read_journal
    from hankweave.events.reading import Event as Event
    from hankweave.events.reading import EventReadError as EventReadError
    from hankweave.events.reading import parse_event as parse_event
    from hankweave.events.reading import read_transition as read_transition
    from hankweave.events.sink import EventSink as EventSink
    from hankweave.events.sink import SinkConfig as SinkConfig
    from hankweave.execution.document import ExecutionDocument as ExecutionDocument
    from hankweave.execution.document import document_of as document_of
    from hankweave.execution.family import Family as Family
    from hankweave.execution.family import family_of as family_of
    from hankweave.execution.layout import ExecutionLayout as ExecutionLayout
    from hankweave.execution.layout import codon_log_name as codon_log_name
    from hankweave.execution.meta import ExecutionMetaError as ExecutionMetaError
    from hankweave.execution.meta import load_execution_meta as load_execution_meta
    from hankweave.execution.setup import managed_executions_root as managed_executions_root
    from hankweave.exitcodes import EXIT_FAILED as EXIT_FAILED
    from hankweave.exitcodes import EXIT_INTERRUPTED as EXIT_INTERRUPTED
    from hankweave.exitcodes import EXIT_OK as EXIT_OK
    from hankweave.exitcodes import EXIT_USAGE as EXIT_USAGE
    from hankweave.faults import kill_point as kill_point
    from hankweave.fsutil import PRIVATE_DIR_MODE as PRIVATE_DIR_MODE
    from hankweave.fsutil import PRIVATE_FILE_MODE as PRIVATE_FILE_MODE
    from hankweave.fsutil import atomic_write_bytes as atomic_write_bytes
    from hankweave.fsutil import fsync_dir as fsync_dir
    from hankweave.fsutil import open_private as open_private
    from hankweave.fsutil import parse_iso as parse_iso
    from hankweave.fsutil import pid_alive as pid_alive
    from hankweave.fsutil import private_dir as private_dir
    from hankweave.fsutil import process_running as process_running
    from hankweave.fsutil import utc_now_iso as utc_now_iso
    from hankweave.harness import NO_HUMAN_MESSAGE as NO_HUMAN_MESSAGE
    from hankweave.harness import AgentStartError as AgentStartError
    from hankweave.harness import AttemptContext as AttemptContext
    from hankweave.harness import AttemptPolicy as AttemptPolicy
    from hankweave.harness import CodonLogRecord as CodonLogRecord
    from hankweave.harness import CodonRequest as CodonRequest
    from hankweave.harness import Harness as Harness
    from hankweave.harness import HarnessConfig as HarnessConfig
    from hankweave.harness import HarnessNotInstalledError as HarnessNotInstalledError
    from hankweave.harness import HarnessSelection as HarnessSelection
    from hankweave.harness import HarnessSelectionError as HarnessSelectionError
    from hankweave.harness import HumanReply as HumanReply
    from hankweave.harness import PreflightKind as PreflightKind
    from hankweave.harness import PreflightProblem as PreflightProblem
    from hankweave.harness import PreflightRequest as PreflightRequest
    from hankweave.harness import StderrLog as StderrLog
    from hankweave.harness import ToolDecision as ToolDecision
    from hankweave.hosts import LOCAL_HOST_NAMES as LOCAL_HOST_NAMES
    from hankweave.hosts import host_allowed as host_allowed
    from hankweave.hosts import host_name as host_name
    from hankweave.hosts import local_host_names as local_host_names
    from hankweave.lazy import lazy_exports as lazy_exports
    from hankweave.links import LINK_ANSWERED_BY as LINK_ANSWERED_BY
    from hankweave.links import ActionClaim as ActionClaim
    from hankweave.links import LinkError as LinkError
    from hankweave.links import act_url as act_url
    from hankweave.links import link_claims as link_claims
    from hankweave.links import link_key as link_key
    from hankweave.links import sign_link as sign_link
    from hankweave.links import verify_link as verify_link
    from hankweave.models import CatalogueSnapshot as CatalogueSnapshot
    from hankweave.models import ModelCost as ModelCost
    from hankweave.models import ModelEntry as ModelEntry
    from hankweave.models import ProviderEntry as ProviderEntry
    from hankweave.models import ReasoningEffort as ReasoningEffort
    from hankweave.models import UnknownModelError as UnknownModelError
    from hankweave.plugin_config import PluginConfig as PluginConfig
    from hankweave.plugins import make_plugin_manager as make_plugin_manager
    from hankweave.processes import AGENT_MARKER_ENV as AGENT_MARKER_ENV
    from hankweave.processes import end_processes as end_processes
    from hankweave.processes import end_processes_now as end_processes_now
    from hankweave.processes import marked_processes as marked_processes
    from hankweave.providers import ANTHROPIC_API_URL as ANTHROPIC_API_URL
    from hankweave.providers import AWS_CREDENTIALS_HINT as AWS_CREDENTIALS_HINT
    from hankweave.providers import PROXY_ANTHROPIC_UPSTREAM_ENV as PROXY_ANTHROPIC_UPSTREAM_ENV
    from hankweave.providers import PROXY_URL_ENV as PROXY_URL_ENV
    from hankweave.providers import CredentialsError as CredentialsError
    from hankweave.providers import ProviderOptions as ProviderOptions
    from hankweave.providers import Route as Route
    from hankweave.providers import aws_credentials_visible as aws_credentials_visible
    from hankweave.providers import route as route
    from hankweave.proxy.server import LlmProxy as LlmProxy
    from hankweave.proxy.server import Upstream as Upstream
    from hankweave.proxy.server import upstreams_for as upstreams_for
    from hankweave.proxy.types import Admission as Admission
    from hankweave.proxy.types import ProxyMiddleware as ProxyMiddleware
    from hankweave.proxy.types import ProxyRecord as ProxyRecord
    from hankweave.proxy.types import ProxyReply as ProxyReply
    from hankweave.proxy.types import ProxyRequest as ProxyRequest
    from hankweave.proxy.types import ProxyResponseHead as ProxyResponseHead
    from hankweave.proxy.types import Refusal as Refusal
    from hankweave.registry import Registry as Registry
    from hankweave.registry import get_registry as get_registry
    from hankweave.runtime.budget import ceiling_name as ceiling_name
    from hankweave.runtime.budget import describe_amount as describe_amount
    from hankweave.runtime.budget_report import RecordedLimits as RecordedLimits
    from hankweave.runtime.budget_report import Spent as Spent
    from hankweave.runtime.budget_report import budget_report as budget_report
    from hankweave.runtime.budget_report import read_recorded_limits as read_recorded_limits
    from hankweave.runtime.budget_report import spent_so_far as spent_so_far
    from hankweave.runtime.failures import failure_kind as failure_kind
    from hankweave.runtime.planner import checkpoint_patterns_through as checkpoint_patterns_through
    from hankweave.runtime.planner import expected_codon_ids as expected_codon_ids
    from hankweave.sandbox import Sandbox as Sandbox
    from hankweave.sandbox import bubblewrap_problem as bubblewrap_problem
    from hankweave.secrets import REDACTION_KINDS as REDACTION_KINDS
    from hankweave.secrets import Redactor as Redactor
    from hankweave.secrets import mask_url_credentials as mask_url_credentials
    from hankweave.secrets import redact_text as redact_text
    from hankweave.sentinel import SentinelAnswer as SentinelAnswer
    from hankweave.sentinel import SentinelDefinition as SentinelDefinition
    from hankweave.sentinel import SentinelError as SentinelError
    from hankweave.sentinel import SentinelFatalError as SentinelFatalError
    from hankweave.sentinel import SentinelFiring as SentinelFiring
    from hankweave.sentinel import SentinelKind as SentinelKind
    from hankweave.sentinel import SentinelOptions as SentinelOptions
    from hankweave.sentinel import SentinelSetup as SentinelSetup
    from hankweave.sentinel import SentinelTrigger as SentinelTrigger
    from hankweave.sentinel import TriggerConfig as TriggerConfig
    from hankweave.server.client import CommandReply as CommandReply
    from hankweave.server.client import ControlClient as ControlClient
    from hankweave.server.client import ControlRefusedError as ControlRefusedError
    from hankweave.server.client import NoServerError as NoServerError
    from hankweave.server.client import ServerAddress as ServerAddress
    from hankweave.server.client import server_address as server_address
    from hankweave.state.costs import codon_cost as codon_cost
    from hankweave.state.costs import codon_cost_complete as codon_cost_complete
    from hankweave.state.costs import codon_tokens as codon_tokens
    from hankweave.state.costs import total_cost as total_cost
    from hankweave.state.lock import LockCorruptError as LockCorruptError
    from hankweave.state.lock import LockError as LockError
    from hankweave.state.lock import LockInfo as LockInfo
    from hankweave.state.lock import live_runtime_lock as live_runtime_lock
    from hankweave.state.lock import this_host as this_host
    from hankweave.state.store import StateLoadError as StateLoadError
    from hankweave.state.store import load_state as load_state
    from hankweave.state.store import read_state_strict as read_state_strict
    from hankweave.state.thread import ExecutionThread as ExecutionThread
    from hankweave.state.thread import analyze_execution_thread as analyze_execution_thread
    from hankweave.state.transitions import CodonFinalCostSet as CodonFinalCostSet
    from hankweave.state.transitions import CodonStarted as CodonStarted
    from hankweave.state.transitions import CodonTransitioned as CodonTransitioned
    from hankweave.state.transitions import CodonTransitionedData as CodonTransitionedData
    from hankweave.state.transitions import CostsIncremented as CostsIncremented
    from hankweave.state.transitions import ExecutionPlanUpdated as ExecutionPlanUpdated
    from hankweave.state.transitions import RunCompleted as RunCompleted
    from hankweave.state.transitions import RunCrashed as RunCrashed
    from hankweave.state.transitions import RunFailed as RunFailed
    from hankweave.state.transitions import RunInterrupted as RunInterrupted
    from hankweave.state.transitions import RunStarted as RunStarted
    from hankweave.state.transitions import RunStartedData as RunStartedData
    from hankweave.state.types import CodonExecution as CodonExecution
    from hankweave.state.types import ContinuationStart as ContinuationStart
    from hankweave.state.types import ExecutionCodonEntry as ExecutionCodonEntry
    from hankweave.state.types import HankweaveState as HankweaveState
    from hankweave.state.types import Interruption as Interruption
    from hankweave.state.types import TokenUsage as TokenUsage
    from hankweave.state.types import dump_state as dump_state
    from hankweave.state.types import end_checkpoint as end_checkpoint
    from hankweave.state.types import record_checkpoints as record_checkpoints
    from hankweave.workspace import DATA_LINK as DATA_LINK
    from hankweave.workspace import WorkspaceScan as WorkspaceScan
    from hankweave.workspace import glob_regex as glob_regex
    from hankweave.workspace import resolve_patterns as resolve_patterns
    from hankweave.workspace import trusted_before as trusted_before
    from hankweave.workspace_watch import WorkspaceWatcher as WorkspaceWatcher
else:
    from hankweave.lazy import lazy_facade

    __getattr__, __dir__ = lazy_facade(globals())
