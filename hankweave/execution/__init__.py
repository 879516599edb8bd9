"""Execution directories: their layout, the data-source hash, metadata, and setup (docs/behaviour.md §2.4-§2.6)."""

from hankweave.execution.datahash import hash_data_source
from hankweave.execution.layout import ExecutionLayout, codon_log_name
from hankweave.execution.meta import (
    ExecutionMeta,
    ExecutionMetaError,
    MetaEnvironment,
    load_execution_meta,
    save_execution_meta,
)
from hankweave.execution.setup import (
    ExecutionSetup,
    ExecutionSetupError,
    ResolvedPaths,
    SetupRequest,
    compute_hank_hash,
    decline,
    default_input_cache_dir,
    find_execution_dir_for_resume,
    find_execution_dirs,
    is_within,
    managed_executions_root,
    materialize_inline_data,
    resolve_data_and_hank_paths,
    setup_execution,
)

__all__ = [
    "ExecutionLayout",
    "ExecutionMeta",
    "ExecutionMetaError",
    "ExecutionSetup",
    "ExecutionSetupError",
    "MetaEnvironment",
    "ResolvedPaths",
    "SetupRequest",
    "codon_log_name",
    "compute_hank_hash",
    "decline",
    "default_input_cache_dir",
    "find_execution_dir_for_resume",
    "find_execution_dirs",
    "hash_data_source",
    "is_within",
    "load_execution_meta",
    "managed_executions_root",
    "materialize_inline_data",
    "resolve_data_and_hank_paths",
    "save_execution_meta",
    "setup_execution",
]
