"""Options shared by several commands, declared once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click


def execution_option(
    help: str = "The execution directory (the one holding .hankweave/).",
) -> Callable[[Any], Any]:
    """``-e/--execution DIR``, required, passed as ``execution_dir``."""
    return click.option("-e", "--execution", "execution_dir", required=True, metavar="DIR",
                        type=click.Path(path_type=Path), help=help)
