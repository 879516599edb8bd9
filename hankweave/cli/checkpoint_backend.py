"""The checkpoint backend of commands that open an existing execution outside ``run``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hankweave.checkpoints import CheckpointStore


def configured_backend() -> type[CheckpointStore]:
    """The backend class ``checkpoints.backend`` names in the settings of the current directory
    and environment (``hankweave.json``, ``HANKWEAVE_RUNTIME_CHECKPOINTS_BACKEND``; default
    ``git``).

    The execution directory does not record its backend, so this is the same lookup a run
    started here would make.  Raises :class:`hankweave.config.errors.ConfigError` for bad
    settings and :class:`hankweave.checkpoints.BackendNotInstalledError`.
    """
    from hankweave.config.settings import resolve_settings
    from hankweave.registry import get_registry

    settings = resolve_settings(cwd=Path.cwd(), hank=None, env=dict(os.environ), cli={})
    return get_registry().checkpoint_backend(settings.settings.checkpoints.backend)
