"""Which command-line words name the hank and which the data, as Hankweave 0.10.0 read them.

``hankweave run [HANK] [DATA]`` also takes ``--config HANK`` and ``--data DATA``. Two
positionals are the hank, then the data. A single positional is the data path unless it looks
like a hank (it ends in ``.json`` or ``.hank``, or is a repository address), as in the
original, so ``hankweave data/`` runs ``./hank.json`` (or ``data/hank.json``) on ``data/``;
when the data is already given (``--data``, ``-i``), the single positional can only be the
hank (ours: ``hankweave run my-hank -i TEXT`` keeps working). A thing given twice, as a
positional and as its option, is a usage error naming both.
"""

from __future__ import annotations

from dataclasses import dataclass

import click

_HANK_SUFFIXES = (".json", ".hank", ".tar.zst")
_HANK_PREFIXES = ("https://", "http://", "git@", "ssh://", "git://", "file://")


@dataclass(frozen=True)
class HankAndData:
    """The hank and data arguments of a launch (None: not given; the usual defaults apply)."""

    hank: str | None
    data: str | None
    lone_argument_is_data: bool = False
    """The data is the single positional, as Hankweave 0.10.0 read it (the hank is then found
    as ``./hank.json`` or ``<data>/hank.json``): worth saying, it surprises people."""

    def data_note(self) -> str | None:
        """Why the data is what it is, when nobody named it as the data; None when they did."""
        if self.lone_argument_is_data:
            return ("the only argument is the data, as Hankweave 0.10 reads it (a hank is named"
                    " by a path ending in .json, or by HANK DATA)")
        if self.data is None:
            return "the current directory: DATA was not given"
        return None


def looks_like_hank(word: str) -> bool:
    """A lone positional that names a hank rather than data (docs/behaviour.md §2.4)."""
    return word.endswith(_HANK_SUFFIXES) or word.startswith(_HANK_PREFIXES)


def hank_and_data(first: str | None, second: str | None, *, config: str | None = None,
                  data: str | None = None, data_given_otherwise: bool = False) -> HankAndData:
    """Sort the positionals ``first`` and ``second`` and ``--config``/``--data`` into the hank
    and the data (see the module docstring). ``data_given_otherwise``: ``-i`` gives the data.

    Raises:
        click.UsageError: the hank or the data is given twice.
    """
    if second is not None:
        return _both(HankAndData(first, second), config=config, data=data)
    if first is None:
        return HankAndData(config, data)
    takes_hank = first != "-" and (looks_like_hank(first) or (
        config is None and (data is not None or data_given_otherwise)))
    if takes_hank:
        return _both(HankAndData(first, None), config=config, data=data)
    return _both(HankAndData(None, first, lone_argument_is_data=True), config=config, data=data)


def _both(positional: HankAndData, *, config: str | None, data: str | None) -> HankAndData:
    if positional.hank is not None and config is not None:
        raise click.UsageError(
            f"The hank is given twice: as the argument {positional.hank!r} and as --config"
            f" {config!r}. Give one of them (a single argument that does not end in .json is"
            " the data path).")
    if positional.data is not None and data is not None:
        raise click.UsageError(
            f"The data is given twice: as the argument {positional.data!r} and as --data"
            f" {data!r}. Give one of them.")
    return HankAndData(positional.hank if config is None else config,
                       positional.data if data is None else data,
                       positional.lone_argument_is_data)
