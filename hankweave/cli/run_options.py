"""click options built from the run options' declarations (``hankweave.config.run_options``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from hankweave.config.run_options import RUN_OPTIONS, RunOption, run_option

F = TypeVar("F", bound=Callable[..., Any])


def run_options(*names: str) -> Callable[[F], F]:
    """Add the declared run options named (every one when none is) to a command, in the
    declarations' order."""
    chosen = [run_option(name) for name in names] if names else list(RUN_OPTIONS)

    def decorate(command: F) -> F:
        for option in reversed(chosen):  # click lists the last-applied option first
            command = _click_option(option)(command)
        return command

    return decorate


def _click_option(option: RunOption) -> Callable[[F], F]:
    text = option.help + (" Kept for resumes with -e." if option.recorded else "")
    declarations = (*option.flags, option.name)
    if option.switch or option.either_way:
        return click.option(*declarations, default=None, help=text)
    if option.value is bool:
        return click.option(*declarations, is_flag=True, flag_value=option.flag_value,
                            default=None, help=text)
    return click.option(*declarations, type=_click_type(option), metavar=option.metavar,
                        help=text)


def _click_type(option: RunOption) -> click.ParamType[Any]:
    if option.value is float:
        return click.FloatRange(min=option.minimum, max=option.maximum,
                                min_open=option.open_minimum)
    if option.value is int:
        bounds = (option.minimum, option.maximum)
        if bounds == (None, None):
            return click.INT
        low, high = (int(b) if b is not None else None for b in bounds)
        return click.IntRange(low, high)
    return click.STRING
