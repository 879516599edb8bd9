"""The settings ``hankweave run`` takes on its command line, each declared once.

A :class:`RunOption` says everything about one option: its flags and help (``hankweave run``
and ``hankweave replay`` build their click options from it), the settings key its value
sets (the command-line layer of :func:`~hankweave.config.settings.resolve_settings`, with
the precedence docs/cli.md states), and whether the execution records it for its resumes
(:mod:`hankweave.execution.intent` builds the run intent's fields and messages from it).
The typed value the runtime reads is the matching :class:`~hankweave.config.settings.Settings`
field; ``hankweave.json``, the hank's ``overrides`` and ``HANKWEAVE_RUNTIME_*`` reach the
same field through their own schemas (docs/cli.md, "Settings").

Adding a run option is one entry in :data:`RUN_OPTIONS` (plus a :class:`Settings` field when
the setting is new) and the code that uses the value.

This module stays free of click: the command line (``hankweave.cli.run_options``) turns the
declarations into click options.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RunOption:
    """One setting given on the command line (see the module docstring)."""

    flags: tuple[str, ...]
    """click's declarations: ``("-m", "--model")``; a switch is ``("--x/--no-x",)``."""
    key: str
    """The settings key the value sets, dotted, in ``hankweave.json``'s names
    (``budget.maxDollars``)."""
    help: str
    value: type = str
    """What the command line reads: ``str``, ``int``, ``float`` or ``bool``."""
    metavar: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    open_minimum: bool = False
    """The minimum itself is refused (``--max-cost 0``)."""
    switch: bool = False
    """``--x/--no-x``: on, off, or not given (None): only "on" overrides the other layers."""
    either_way: bool = False
    """``--x/--y``: both spellings set the setting, the first to true and the second to false
    (``--without-proxy/--proxy``); not given (None) leaves it to the other layers."""
    flag_value: bool | None = None
    """A plain flag: the setting's value when it is given (``--no-autostart`` gives False)."""
    dest: str | None = None
    """The Python name, when the flag's own would mislead (``--no-autostart``: ``autostart``,
    the setting it sets)."""
    recorded: str | None = None
    """The execution records the option for its resumes (docs/cli.md, "Run intent"); how
    messages name it: ``dollar ceiling``."""
    unit: str = ""
    """How a recorded value is shown: ``$`` before it, ``s`` after it, or nothing."""
    words: tuple[str, str] = ("on", "off")
    """How a recorded true and false are shown (``--without-proxy`` true is the proxy
    ``off``)."""

    @property
    def name(self) -> str:
        """The option's Python name: :attr:`dest`, else click's (``--max-cost`` ->
        ``max_cost``)."""
        if self.dest is not None:
            return self.dest
        long = [flag for flag in self.flags if flag.startswith("--")][-1]
        return long.partition("/")[0].removeprefix("--").replace("-", "_")

    @property
    def flag(self) -> str:
        """The flag messages name it by: ``-m``, ``--max-cost``."""
        return self.flags[0].partition("/")[0]

    def flag_for(self, value: Any) -> str:
        """The flag that gives ``value``: the second spelling of an :attr:`either_way`
        option for false (``--proxy``), else :attr:`flag`."""
        if self.either_way and value is False:
            return self.flags[0].partition("/")[2]
        return self.flag

    def layer_value(self, given: Any) -> Any:
        """What the option given as ``given`` puts in the command-line settings layer (None:
        nothing; the lower layers decide)."""
        return (True if given else None) if self.switch else given

    def shown(self, value: Any) -> str:
        """A recorded value as messages show it: ``$2.5``, ``600 s``, ``on``, ``none``."""
        if value is None:
            return "none"
        if isinstance(value, bool):
            return self.words[0] if value else self.words[1]
        if self.unit == "$":
            return f"${value:g}"
        if self.unit == "s":
            return f"{value:g} s"
        return str(value)


RUN_OPTIONS: tuple[RunOption, ...] = (
    RunOption(("-o", "--output"), "outputDirectory", "Where codons' outputFiles are copied.",
              metavar="DIR"),
    RunOption(("-m", "--model"), "model", "Run every codon with this model (a global"
              " override).", recorded="model override"),
    RunOption(("-p", "--port"), "port", "WebSocket port (0: any free port).", value=int,
              minimum=0, maximum=65535),
    RunOption(("--host",), "host", "Address the WebSocket server binds to (default 127.0.0.1;"
              " any other address is reachable from other machines).", metavar="ADDRESS"),
    RunOption(("--no-autostart",), "autostart", "Wait for a start command before each codon.",
              value=bool, flag_value=False, dest="autostart"),
    RunOption(("--idle-timeout",), "idleTimeout", "Close a WebSocket client that answers no"
              " ping for this long (0, the default: the usual 20 s keepalive).", value=int,
              metavar="SECONDS", minimum=0, maximum=255),
    RunOption(("--anthropic-base-url",), "anthropicBaseUrl", "The Anthropic endpoint agents"
              " call (ANTHROPIC_BASE_URL of the Claude CLI, api_base of litellm); under"
              " --mock-provider the mock answers instead.", metavar="URL",
              recorded="Anthropic base URL"),
    RunOption(("--without-proxy/--proxy",), "withoutProxy", "Call providers directly (the"
              " default), or --proxy: every agent request through hankweave's LLM proxy on"
              " 127.0.0.1, recorded and held to the budget.", value=bool, either_way=True,
              recorded="LLM proxy", words=("off", "on")),
    RunOption(("--max-cost",), "budget.maxDollars", "Run-wide dollar ceiling.", value=float,
              metavar="USD", minimum=0, open_minimum=True, recorded="dollar ceiling",
              unit="$"),
    RunOption(("--max-time",), "budget.maxTimeSeconds", "Run-wide time ceiling.", value=float,
              metavar="SECONDS", minimum=0, open_minimum=True, recorded="time ceiling",
              unit="s"),
    RunOption(("--max-cost-per-codon",), "maxCostPerCodon", "Dollar ceiling of each codon"
              " attempt: a codon's own budget.maxDollars applies when it is lower. A codon"
              " that reaches it is stopped as by its own cap.", value=float, metavar="USD",
              minimum=0, open_minimum=True, recorded="dollar ceiling per codon", unit="$"),
    RunOption(("--sandbox",), "sandbox.mode", "Run agents in an OS sandbox (bubblewrap):"
              " auto (where it works; the default), required (fail before any codon where it"
              " cannot), off.", metavar="auto|required|off", recorded="sandbox"),
    RunOption(("--shim-idle-timeout",), "shimIdleTimeout", "Abort an agent that sends nothing"
              " for this long.", value=int, metavar="SECONDS", minimum=1, maximum=1800,
              recorded="agent idle timeout", unit="s"),
    RunOption(("--ignore-rig-failures/--no-ignore-rig-failures",), "ignoreRigFailures",
              "Treat every rig operation as allowFailure (--no-... drops a recorded one).",
              value=bool, switch=True, recorded="ignore rig failures"),
    RunOption(("--overwrite-output",), "overwriteOutput", "Output copies replace existing"
              " files.", value=bool, flag_value=True),
    RunOption(("--user",), "user", "Who runs it, recorded on the run (default:"
              " $HANKWEAVE_USER, else your login name).", metavar="NAME"),
)
"""Every run option, in the order ``--help`` and messages list them."""

RECORDED_OPTIONS: tuple[RunOption, ...] = tuple(o for o in RUN_OPTIONS if o.recorded)
"""The options an execution records for its resumes."""


def run_option(name: str) -> RunOption:
    """The option whose Python name is ``name``."""
    for option in RUN_OPTIONS:
        if option.name == name:
            return option
    raise KeyError(name)


def settings_layer(given: Mapping[str, Any],
                   options: Iterable[RunOption] = RUN_OPTIONS) -> dict[str, Any]:
    """The command-line settings layer of the options ``given`` (by Python name), nested
    as in ``hankweave.json``: ``{"budget": {"maxDollars": 2.5}}``."""
    layer: dict[str, Any] = {}
    for option in options:
        value = option.layer_value(given.get(option.name))
        if value is None:
            continue
        *sections, last = option.key.split(".")
        target = layer
        for section in sections:
            target = target.setdefault(section, {})
        target[last] = value
    return layer
