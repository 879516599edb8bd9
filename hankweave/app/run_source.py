"""What plays a run's codons: the hank's own agents, or a recording (``run --replay``).

The launch asks its :class:`RunSource` every question on which a replay differs from a run:
which hank and data are used when none is given, whether the data is copied, whether the
preflight checks that each model's harness is installed, which harness plays each codon,
whether sentinels run and people are asked, and what happens to the hank's shell commands.
So neither the launch nor the runtime holds a replay special case: a replay is the source
whose harness selection is "every codon: the recording's player", and the runtime asks it
as it would ask the plugins (:class:`~hankweave.harness.HarnessSelection`).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from hankweave.app.playback import REPLAY_HARNESS, Playback
from hankweave.app.request import LaunchError, LaunchRequest
from hankweave.runtime.rig import CommandPolicy

if TYPE_CHECKING:
    from hankweave.config.hank import HankFile
    from hankweave.harness import Harness
    from hankweave.models import ModelEntry
    from hankweave.registry import Registry


class RunSource(Protocol):
    """What plays the codons of a run (see the module docstring)."""

    @property
    def copies_data(self) -> bool:
        """The execution copies its data source (a replay holds everything it plays)."""

    @property
    def checks_harnesses(self) -> bool:
        """The preflight checks that each codon's model has an installed harness."""

    @property
    def sentinels(self) -> bool:
        """Codons' sentinels run."""

    @property
    def humans(self) -> bool:
        """Approval gates apply and questions reach people."""

    @property
    def kept(self) -> Playback | None:
        """The recording a new execution keeps a copy of (``.hankweave/recording/``)."""

    def select_harness(self, model: ModelEntry) -> type[Harness]:
        """The harness that plays codons on ``model``."""

    def check_request(self, request: LaunchRequest) -> None:
        """Refuse options that do not go with this source (before anything is read)."""

    def hank_and_data(self, request: LaunchRequest) -> tuple[str | None, str | None]:
        """The HANK and DATA arguments, with this source's defaults for those not given."""

    def check_hank(self, hank: HankFile) -> None:
        """Refuse a hank this source cannot play."""

    def command_policy(self, allowed: bool) -> CommandPolicy:
        """What the run does with the hank's shell commands (``allowed``: the run's intent
        says ``--allow-commands``)."""

    def announce(self, hank: HankFile, policy: CommandPolicy, request: LaunchRequest) -> None:
        """Before the run starts: tell the person what this source does that they must know."""

    def close(self) -> None:
        """Give back what opening the source took."""


@dataclass
class Agents:
    """The hank's own agents: each codon on the harness the plugins select for its model."""

    registry: Registry
    copies_data = False
    checks_harnesses = True
    sentinels = True
    humans = True
    kept: Playback | None = None

    def select_harness(self, model: ModelEntry) -> type[Harness]:
        return self.registry.select_harness(model)

    def check_request(self, request: LaunchRequest) -> None:
        pass

    def hank_and_data(self, request: LaunchRequest) -> tuple[str | None, str | None]:
        return request.hank, request.data

    def check_hank(self, hank: HankFile) -> None:
        pass

    def command_policy(self, allowed: bool) -> CommandPolicy:
        return CommandPolicy.RUN

    def announce(self, hank: HankFile, policy: CommandPolicy, request: LaunchRequest) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass
class Replay:
    """A recording played back: every codon on its player, no provider, no sentinel, nobody
    asked; the recording's shell commands are its author's code, so they are skipped unless
    ``--allow-commands`` asks to run them, each printed first."""

    playback: Playback
    fresh: bool
    """Replaying a source into a new execution (which keeps a copy of it), rather than
    resuming a replayed execution from the copy it kept."""
    copies_data = True
    checks_harnesses = False
    sentinels = False
    humans = False

    @property
    def kept(self) -> Playback | None:
        return self.playback if self.fresh else None

    def select_harness(self, model: ModelEntry) -> type[Harness]:
        return self.playback.harness

    def check_request(self, request: LaunchRequest) -> None:
        if request.mock_provider is not None:
            raise LaunchError("--mock-provider does not go with a replay: a replay plays its"
                              " recording and talks to no provider")

    def hank_and_data(self, request: LaunchRequest) -> tuple[str | None, str | None]:
        data = request.data or (str(self.playback.data_path) if self.playback.data_path
                                else str(_empty_data_dir(request)))
        return request.hank or str(self.playback.hank_path), data

    def check_hank(self, hank: HankFile) -> None:
        from hankweave.runtime.planner import expected_codon_ids

        missing = self.playback.missing_logs(expected_codon_ids(hank))
        if missing:
            raise LaunchError(f"Cannot replay: {len(missing)} codon log(s) not found in the"
                              f" recording: {', '.join(missing)} (was it recorded from another"
                              " version of this hank?)")

    def command_policy(self, allowed: bool) -> CommandPolicy:
        return CommandPolicy.ANNOUNCE if allowed else CommandPolicy.SKIP

    def announce(self, hank: HankFile, policy: CommandPolicy, request: LaunchRequest) -> None:
        """One notice listing every command the recording's hank would run, and whether
        they run."""
        lines = _shell_commands(hank)
        if not lines:
            return
        if policy is CommandPolicy.SKIP:
            head = (f"[REPLAY] The recording's hank holds {len(lines)} shell command(s). None"
                    " of them runs: a recording's commands are its author's code; pass"
                    " --allow-commands to run them (rig copies and the recorded file changes"
                    " still apply):")
            lines.append(f"Read them; to replay with them: {_allow_commands_hint(request)}")
        else:
            head = (f"[REPLAY] --allow-commands: the recording's {len(lines)} shell command(s)"
                    " run on this machine as you, each printed before it runs:")
        request.notify("\n".join([head, *lines]))

    def close(self) -> None:
        self.playback.close()


def open_source(request: LaunchRequest, registry: Registry) -> RunSource:
    """The run's source: the recording ``--replay`` names, the one a replayed execution kept
    when ``-e`` resumes it, else the hank's own agents."""
    if request.replay:
        return Replay(_open_recording(request, registry), fresh=True)
    kept = _kept_recording(request, registry)
    return Replay(kept, fresh=False) if kept is not None else Agents(registry)


def _open_recording(request: LaunchRequest, registry: Registry) -> Playback:
    """Open the replay source; replay always starts a new execution directory."""
    if request.execution:
        from hankweave.execution.layout import ExecutionLayout

        if ExecutionLayout(Path(request.cwd, request.execution)).state_file.exists():
            raise LaunchError(f"{request.execution} already holds an execution; a replay always"
                              " starts a fresh one (omit -e, or give a new directory; to resume"
                              f" a replay: hankweave run -e {shlex.quote(request.execution)})")
    recording = _play(request, registry, Path(request.cwd, request.replay or ""),
                      f"replay {request.replay}")
    request.notify(f"[REPLAY] Starting a fresh run from the recording {request.replay}")
    return recording


def _kept_recording(request: LaunchRequest, registry: Registry) -> Playback | None:
    """The recording a replayed execution keeps, when ``-e`` resumes one: the rest of a replay
    is played from it, never by a live agent."""
    if not request.execution or request.start_new:
        return None
    from hankweave.execution.layout import ExecutionLayout
    from hankweave.execution.meta import ExecutionMetaError, load_execution_meta

    layout = ExecutionLayout(Path(request.cwd, request.execution))
    try:
        kept = load_execution_meta(layout.meta_file).recording
    except ExecutionMetaError:
        return None  # no execution yet, or one whose metadata setup reports on
    if kept is None:
        return None
    recording = _play(request, registry, layout.path / kept,
                      f"resume the replay in {request.execution}")
    request.notify(f"[REPLAY] Resuming the replay in {layout.path} from the recording it keeps")
    return recording


def _play(request: LaunchRequest, registry: Registry, source: Path, action: str) -> Playback:
    """Open ``source`` with the replay plugin; ``action`` names what it is for in errors."""
    harness = registry.harnesses().get(REPLAY_HARNESS)
    opener = getattr(harness, "open_recording", None)
    if opener is None:
        raise LaunchError(f"Cannot {action}: replay needs the replay plugin: pip install"
                          " hankweave-replay")
    limit = request.env.get("HANKWEAVE_REPLAY_MAX_DELAY_MS")
    try:
        recording: Playback = opener(source, speed=request.replay_speed,
                                     max_delay_ms=int(limit) if limit else None)
    except (ValueError, OSError) as exc:
        raise LaunchError(f"Cannot {action}: {exc}") from None
    for warning in recording.warnings:
        request.notify(f"warning: {warning}")
    return recording


def _shell_commands(hank: HankFile) -> list[str]:
    """Every shell command the hank would run, one line each, saying where."""
    from hankweave.config.hank import RigCommand

    lines = []
    for codon_id, codon in hank.codon_configs().items():
        for op in codon.rig_setup or ():
            if isinstance(op, RigCommand):
                lines.append(f"  codon {codon_id}, rig setup: {op.command.run}")
        for index, group in enumerate(codon.output_files or ()):
            for before in group.before_copy or ():
                lines.append(f"  codon {codon_id}, output group {index} beforeCopy:"
                             f" {before.command.run}")
    return lines


def _allow_commands_hint(request: LaunchRequest) -> str:
    """The pasteable command that plays the same recording with its commands: a fresh replay
    with the same hank, data, output folder and pace (in a new managed directory), or the
    resumed replay's directory again."""
    if request.replay is not None:
        words = ["hankweave", "replay", request.replay,
                 *(given for given in (request.hank, request.data) if given is not None)]
        if request.options.get("output") is not None:
            words += ["-o", request.options["output"]]
        if request.replay_speed != "instant":
            words += ["--replay-speed", request.replay_speed]
        return shlex.join([*words, "--allow-commands"])
    return f"hankweave run -e {shlex.quote(request.execution or '.')} --allow-commands"


def _empty_data_dir(request: LaunchRequest) -> Path:
    """A stable, empty data source for replays whose recording carries no data."""
    from hankweave.execution.setup import default_input_cache_dir

    path = default_input_cache_dir(request.env).parent / "empty-data"
    path.mkdir(parents=True, exist_ok=True)
    return path
