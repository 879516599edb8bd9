"""`.hankweave/run-intent.json`: where and how an execution's agents run, kept for its resumes.

A run's *intent* is the options of ``hankweave run`` that decide where and how its agents run:
the mock provider (``--mock-provider SCRIPT``), each run option declared ``recorded`` in
:mod:`hankweave.config.run_options` (the model override ``-m``, the budget and harness
overrides ``--max-cost``, ``--max-time``, ``--max-cost-per-codon``, ``--shim-idle-timeout``,
``--ignore-rig-failures``), and whether a replay runs its recording's shell commands
(``--allow-commands``).  They belong to the execution, not to one
command line, so that a printed ``hankweave run -e DIR`` resumes the run that printed it:

* every run records the intent it runs with, after it takes the execution's lock;
* a resume (``-e DIR`` without ``-n``) reuses the recorded value of each option it is not given;
  an option given again replaces it.  Leaving the mock provider takes ``--no-mock-provider``,
  dropping ``--ignore-rig-failures`` takes ``--no-ignore-rig-failures``: a missing flag never
  means "off", or a pasted hint would quietly move a dry run to a real, paid provider.  The
  one exception is safe by construction: a replay started without ``--allow-commands`` records
  ``false``, so its resumes never run the recording's commands unless ``--allow-commands`` is
  given again;
* the mock provider's script is recorded as a copy, ``.hankweave/mock-provider/script.json``,
  with the path it was given at and its sha256: a resume from another directory, or after the
  script moved, plays the same script, and the execution says what it was made from.  Giving
  ``--mock-provider`` again (the same file edited, or another) replaces the copy.

Only these option values are kept, never an environment value or a key.  The file is written
atomically with mode 0600; a field this version does not know is an error (a newer version's
option must not be dropped silently).  Other run options (``-o``, ``--port``, ``--headless``,
``--wait-for-answers``, ...) decide how this one process reports, not where agents run, and are
not recorded.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from pydantic.alias_generators import to_camel

from hankweave.config.errors import ConfigError
from hankweave.config.run_options import RECORDED_OPTIONS, RunOption, run_option
from hankweave.execution.layout import ExecutionLayout
from hankweave.fsutil import atomic_write_bytes

INTENT_FILE_MODE = 0o600

T = TypeVar("T")


class RunIntentError(ConfigError):
    """`run-intent.json` (or the script copy it names) cannot be read or is not valid."""


class _IntentModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel,
                              populate_by_name=True, serialize_by_alias=True)


class RecordedScript(_IntentModel):
    """The mock provider script a run was given; its copy is
    :attr:`ExecutionLayout.mock_provider_script`."""

    source: str
    """The script's absolute path when it was given (for messages; runs read the copy)."""
    sha256: str
    """The sha256 hex of the copy's bytes."""

    @classmethod
    def of(cls, source: Path, content: bytes) -> RecordedScript:
        return cls(source=os.path.abspath(source), sha256=hashlib.sha256(content).hexdigest())


class IntentBase(_IntentModel):
    """The content of `.hankweave/run-intent.json`: each option as the runs use it (None, or
    False: not given, the settings files and the hank decide).  :data:`RunIntent` adds a field
    for each recorded run option (:data:`~hankweave.config.run_options.RECORDED_OPTIONS`)."""

    version: Literal[1] = 1
    mock_provider: RecordedScript | None = None
    allow_commands: bool = False
    """``--allow-commands``: a replay runs its recording's rig ``command`` operations and
    ``beforeCopy`` commands (without it they are skipped; runs of one's own hank always run
    them)."""

    def value(self, name: str) -> Any:
        """The recorded value of the option named ``name`` (its Python name)."""
        return getattr(self, name)

    def to_json_bytes(self) -> bytes:
        data = self.model_dump(by_alias=True, exclude_none=True)
        return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _option_field(option: RunOption) -> tuple[Any, Any]:
    # A switch recorded off is `false`, as "never given" is: only "on" is a choice to keep.
    return (bool, False) if option.switch else (option.value | None, None)


if TYPE_CHECKING:
    RunIntent = IntentBase
else:
    RunIntent = create_model(
        "RunIntent", __base__=IntentBase, __doc__=IntentBase.__doc__,
        **{option.name: _option_field(option) for option in RECORDED_OPTIONS})


class GivenIntent:
    """The intent options one command line gives (None: not given)."""

    def __init__(self, *, mock_provider: RecordedScript | None = None,
                 no_mock_provider: bool = False, allow_commands: bool | None = None,
                 **options: Any) -> None:
        """``options``: the recorded run options given, by name (a switch: True for
        ``--x``, False for ``--no-x``)."""
        unknown = set(options) - {option.name for option in RECORDED_OPTIONS}
        if unknown:
            raise TypeError(f"not recorded run options: {', '.join(sorted(unknown))}")
        self.mock_provider = mock_provider
        self.no_mock_provider = no_mock_provider
        self.allow_commands = allow_commands
        self.options = options

    def value(self, name: str) -> Any:
        """The value given for ``name`` (None: not given)."""
        return getattr(self, name) if name in _SPECIAL else self.options.get(name)


_SPECIAL = ("mock_provider", "allow_commands")
"""The intent's options that are not run settings (their own flags, their own rules)."""


def merge_intent(recorded: IntentBase | None, given: GivenIntent) -> IntentBase:
    """The intent a run uses: each option given on its command line, else the recorded one.

    Raises:
        RunIntentError: both ``--mock-provider`` and ``--no-mock-provider`` are given.
    """
    if given.mock_provider is not None and given.no_mock_provider:
        raise RunIntentError("--mock-provider and --no-mock-provider contradict each other:"
                             " give one of them")
    base = recorded or RunIntent()
    mock = given.mock_provider or (None if given.no_mock_provider else base.mock_provider)
    values = {name: _given_or(given.value(name), base.value(name))
              for name in (*_SPECIAL[1:], *(option.name for option in RECORDED_OPTIONS))}
    return RunIntent(mock_provider=mock, **values)


def _given_or(given: T | None, recorded: T) -> T:
    return recorded if given is None else given


def _labels() -> dict[str, str]:
    """How each option is named in messages, in the order they are listed."""
    labels = {"mock_provider": "mock provider (--mock-provider)"}
    labels.update((option.name, f"{option.recorded} ({option.flag})")
                  for option in RECORDED_OPTIONS)
    labels["allow_commands"] = "allow a replay's commands (--allow-commands)"
    return labels


def changes(old: IntentBase, new: IntentBase) -> list[str]:
    """One line per option whose value differs: ``label: old -> new``."""
    lines = []
    for name, label in _labels().items():
        before, after = _shown(old, name), _shown(new, name)
        if old.value(name) != new.value(name):
            if before == after:  # the same script path, edited since
                before, after = f"{before} (sha256 {_sha(old)})", f"{after} (sha256 {_sha(new)})"
            lines.append(f"{label}: {before} -> {after}")
    return lines


def reused(recorded: IntentBase, given: GivenIntent) -> list[str]:
    """What a resume takes from the recorded intent: each option recorded with a value and not
    given on the command line, as ``label value``."""
    taken = []
    for name, label in _labels().items():
        if given.value(name) is None and _said(name, recorded.value(name)) \
                and not (name == "mock_provider" and given.no_mock_provider):
            taken.append(f"{label.partition(' (')[0]} {_shown(recorded, name)}")
    return taken


def _said(name: str, value: object) -> bool:
    """Whether a recorded value is worth naming: set, and not a switch that is off (either
    spelling of a ``--x/--y`` option is a choice)."""
    if value is None:
        return False
    return value is not False or (name not in _SPECIAL and run_option(name).either_way)


def _shown(intent: IntentBase, name: str) -> str:
    value = intent.value(name)
    if isinstance(value, RecordedScript):
        return value.source
    if name in _SPECIAL:
        return "none" if value is None else ("on" if value else "off")
    return run_option(name).shown(value)


def _sha(intent: IntentBase) -> str:
    return intent.mock_provider.sha256[:12] if intent.mock_provider else "-"


def load_run_intent(layout: ExecutionLayout) -> RunIntent | None:
    """The intent recorded in the execution, or None when none is (an execution made before
    intents were recorded resumes with what its command line gives).

    Raises:
        RunIntentError: the file cannot be read or is not a valid intent; the message names it
            and says what to do.
    """
    path = layout.run_intent_file
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _unusable(path, str(exc)) from None
    try:
        return RunIntent.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}"
                             for e in exc.errors())
        raise _unusable(path, problems) from None


def _unusable(path: Path, problem: str) -> RunIntentError:
    return RunIntentError(
        f"Cannot read the run options recorded in {path}: {problem}. They say where this"
        " execution's agents run (the mock provider, the model override), so nothing was run."
        " Repair the file, or remove it and give the options again on the command line (for a"
        " dry run: --mock-provider SCRIPT); the next run records them.")


def script_copy(layout: ExecutionLayout, intent: RunIntent) -> Path:
    """The recorded mock provider script's copy, checked to be the one recorded.

    Raises:
        RunIntentError: the copy is missing or was changed since it was recorded.
    """
    recorded = intent.mock_provider
    assert recorded is not None
    path = layout.mock_provider_script
    try:
        content = path.read_bytes()
    except OSError as exc:
        problem = f"cannot read {path}: {exc.strerror or exc}"
    else:
        if hashlib.sha256(content).hexdigest() == recorded.sha256:
            return path
        problem = f"{path} was changed since it was recorded"
    raise RunIntentError(
        f"This execution's runs use a mock provider (the script {recorded.source}), but its"
        f" recorded copy is unusable: {problem}. Nothing was run. Give the script again with"
        " --mock-provider SCRIPT, or leave the mock provider with --no-mock-provider (the"
        " agents then call the real providers).")


def save_run_intent(layout: ExecutionLayout, intent: RunIntent,
                    script: bytes | None = None) -> None:
    """Record ``intent`` (and, when given, the mock provider script's new copy, first: the
    intent names it), each atomically with mode 0600."""
    if script is not None:
        layout.mock_provider_script.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic_write_bytes(layout.mock_provider_script, script, mode=INTENT_FILE_MODE)
    atomic_write_bytes(layout.run_intent_file, intent.to_json_bytes(), mode=INTENT_FILE_MODE)
