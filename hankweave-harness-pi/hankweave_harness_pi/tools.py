"""The pi agent's tools: ``read``, ``write``, ``edit``, ``bash``, ``grep``, ``find`` and ``ls``,
and the schema of ``ask_human``, the kernel's own tool.

The model calls them by pi's names with JSON arguments; :meth:`Toolbox.run` runs one call and
always answers with a :class:`ToolOutcome`, so a bad call (an unknown tool, a missing argument, a
path outside the workspace) costs the agent one turn, never the codon.  The codon log shows the
calls under Claude Code's names (:data:`CLAUDE_NAMES`, :func:`log_input`), so a log reads the
same whichever harness ran the codon.

Confinement: every path argument is resolved with its symlinks (``os.path.realpath``) and must
land inside the workspace root (the codon's agentRoot) or, for reading only, inside one of the
read-only roots (the hank's data folder, which ``agentRoot/read_only_data_source`` links to).
The searches (``grep``, ``find``, ``ls``) skip symlinks that lead anywhere else and never descend
into a symlinked folder, so a search from the root does not wander into the data either.
``bash`` is not confined: it runs in the root with the codon's environment, and whatever sandbox
the runtime provides is its only fence.

``ask_human`` is offered with them (:data:`AGENT_TOOL_SPECS`) but is no workspace tool: the
agent loop answers it with the kernel's ``AttemptContext.ask_human`` (:func:`question_arguments`
reads its arguments), never through the tool policy.

Nothing here needs litellm: the tools are standard-library code (and the kernel's glob
syntax, as ``checkpointedFiles`` uses it), tested on their own.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import math
import os
import re
import shutil
import signal
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hankweave.api import glob_regex

if TYPE_CHECKING:
    from hankweave.api import Sandbox

__all__ = [
    "AGENT_TOOL_SPECS",
    "ASK_HUMAN",
    "ASK_HUMAN_SPEC",
    "CLAUDE_NAMES",
    "TOOL_SPECS",
    "ToolError",
    "ToolOutcome",
    "Toolbox",
    "log_input",
    "question_arguments",
]

READ_LINE_LIMIT = 2000
"""Lines ``read`` returns when the model gives no ``limit``."""
READ_LINE_CHARS = 2000
"""Longer lines are cut: one minified line must not fill the context."""
READ_MAX_CHARS = 100_000
"""Characters one ``read`` returns at most (whole lines); the rest is one ``offset`` away."""
BINARY_SNIFF_BYTES = 8192
"""A NUL byte in a file's first 8 KiB marks it binary (git's rule)."""
GREP_MATCH_LIMIT = 200
GREP_LINE_CHARS = 500
FIND_RESULT_LIMIT = 500
LS_ENTRY_LIMIT = 1000
BASH_MAX_TIMEOUT_S = 600.0
KILL_GRACE_S = 2.0
"""After SIGTERM: how long a command's processes may take to exit before SIGKILL."""
DRAIN_GRACE_S = 1.0
"""After the processes are gone: how long to wait for the last output to be read."""
SKIPPED_DIRS = frozenset({".git"})


@dataclass(frozen=True)
class ToolOutcome:
    """The answer to one tool call, as the model is shown it."""

    text: str
    is_error: bool = False


class ToolError(Exception):
    """A tool call that cannot be done; its message is written for the model to act on."""


# --- the model-facing schemas ---------------------------------------------------------------

CLAUDE_NAMES: dict[str, str] = {
    "read": "Read",
    "write": "Write",
    "edit": "Edit",
    "bash": "Bash",
    "grep": "Grep",
    "find": "Glob",
    "ls": "LS",
}
"""pi's tool names (what the model calls) to Claude Code's (what the codon log shows)."""


def _spec(name: str, description: str, properties: dict[str, dict[str, Any]],
          required: Sequence[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties,
                           "required": list(required)},
        },
    }


def _string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


_PATH = "Path relative to the workspace root (an absolute path must lie inside the workspace)."
_SEARCH_PATH = "Folder to search, relative to the workspace root; the root when left out."

TOOL_SPECS: list[dict[str, Any]] = [
    _spec(
        "read",
        "Read a text file. Returns its lines numbered like `cat -n` (line number, a tab, the "
        f"line), at most {READ_LINE_LIMIT} lines from `offset`; says how to read on when more "
        f"lines follow. Lines longer than {READ_LINE_CHARS} characters are cut. Read a file "
        "before editing it.",
        {"path": _string(_PATH),
         "offset": {"type": "integer",
                    "description": "Number of the first line to return (1-based); default 1."},
         "limit": {"type": "integer",
                   "description": f"How many lines to return; default {READ_LINE_LIMIT}."}},
        ["path"],
    ),
    _spec(
        "write",
        "Write a UTF-8 text file, creating missing parent folders. Replaces the whole file if "
        "it exists; to change part of a file, use edit.",
        {"path": _string(_PATH), "content": _string("The complete new content of the file.")},
        ["path", "content"],
    ),
    _spec(
        "edit",
        "Replace one exact piece of text in a file. `old_text` must match the file exactly "
        "(whitespace and indentation included) and exactly once; include enough surrounding "
        "lines to make it unique. Copy it from read's output without the line numbers.",
        {"path": _string(_PATH),
         "old_text": _string("The exact text to replace; must occur exactly once."),
         "new_text": _string("The text to put in its place.")},
        ["path", "old_text", "new_text"],
    ),
    _spec(
        "bash",
        "Run a shell command with `bash -c` in the workspace root and return its output "
        "(stdout and stderr together) and, when it fails, its exit code. Long output keeps its "
        "beginning and end. Processes the command starts in the background end when it "
        "finishes, so start a server and use it in the same command. Prefer read, grep, find "
        "and ls for looking at files.",
        {"command": _string("The command line to run."),
         "timeout": {"type": "number",
                     "description": "Seconds before the command is killed; default 120, "
                                    f"at most {BASH_MAX_TIMEOUT_S:g}."}},
        ["command"],
    ),
    _spec(
        "grep",
        "Search file contents for a Python regular expression. Returns `path:LINE: text` for "
        f"each matching line, at most {GREP_MATCH_LIMIT} matches; binary files and .git are "
        "skipped.",
        {"pattern": _string("Python regular expression (re syntax) to search for."),
         "path": _string("File or folder to search, relative to the workspace root; the root "
                         "when left out."),
         "glob": _string("Only search files matching this glob, e.g. `*.py` (matched against "
                         "file names) or `src/**/*.ts` (matched against paths)."),
         "ignore_case": {"type": "boolean", "description": "Match case-insensitively."}},
        ["pattern"],
    ),
    _spec(
        "find",
        "Find files by glob pattern. `*` and `?` stay within one folder, `**` spans folders, "
        "`{a,b}` offers alternatives. A pattern without `/` (e.g. `*.md`) matches file names at "
        "any depth; one with `/` matches paths relative to `path`. Returns the matching paths "
        f"relative to the workspace root, sorted, at most {FIND_RESULT_LIMIT}.",
        {"pattern": _string("Glob pattern, e.g. `**/*.md` or `src/*.py`."),
         "path": _string(_SEARCH_PATH)},
        ["pattern"],
    ),
    _spec(
        "ls",
        "List a folder's entries, sorted; folders end with `/`.",
        {"path": _string("Folder to list, relative to the workspace root; the root when left "
                         "out.")},
        [],
    ),
]
"""The seven tools as OpenAI function-calling schemas, in the order the model is offered them.

Bounds live in the descriptions, not in `minimum`/`maximum` keywords, which some providers'
schema dialects reject; the tools check them anyway."""

_SCHEMAS: dict[str, dict[str, Any]] = {
    spec["function"]["name"]: spec["function"]["parameters"] for spec in TOOL_SPECS
}

ASK_HUMAN = "ask_human"
"""The question tool's name, for the model and in the codon log alike."""

ASK_HUMAN_SPEC: dict[str, Any] = _spec(
    ASK_HUMAN,
    "Ask a human a question and wait for the answer. Use it only when you cannot go on "
    "without a decision or a fact that only a person can give; decide everything else "
    "yourself. Give `options` when the answer must be one of a few choices. When no human "
    "is available the result says so: then continue on your own judgement.",
    {"question": _string("The question, complete enough to be answered without seeing the "
                         "conversation."),
     "options": {"type": "array", "items": {"type": "string"},
                 "description": "The allowed answers, when the answer must be one of them; "
                                "leave out for a free answer."}},
    ["question"],
)

AGENT_TOOL_SPECS: list[dict[str, Any]] = [*TOOL_SPECS, ASK_HUMAN_SPEC]
"""Every tool the model is offered: the seven workspace tools, then ``ask_human``."""


# --- argument spelling ----------------------------------------------------------------------

def _snake_case(key: str) -> str:
    key = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", key)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", key).lower()


def log_input(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments as the codon log shows them (Claude's spelling): `path` and `filePath`
    become `file_path`; other camelCase keys become snake_case.

    Logs written by either harness then name a file the same way, so readers of the log need
    one spelling only.
    """
    shown: dict[str, Any] = {}
    for key, value in arguments.items():
        name = _snake_case(key)
        shown["file_path" if name == "path" else name] = value
    return shown


def _call_arguments(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The model's arguments in this module's spelling: models trained on Claude Code or on pi
    send `file_path` or `oldText`; accepting them saves a wasted turn."""
    spelled: dict[str, Any] = {}
    for key, value in arguments.items():
        name = _snake_case(key)
        spelled["path" if name == "file_path" else name] = value
    return spelled


def _checked_arguments(tool: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments `tool`'s schema declares, of the declared types; `None` counts as left out
    and undeclared arguments are ignored, since models add them freely."""
    schema = _SCHEMAS[tool]
    given = _call_arguments(arguments)
    checked: dict[str, Any] = {}
    for key, prop in schema["properties"].items():
        value = given.get(key)
        if value is None:
            if key in schema["required"]:
                raise ToolError(f'{tool} needs the argument "{key}": {prop["description"]}')
            continue
        checked[key] = _coerced(tool, key, value, prop["type"])
    return checked


def question_arguments(arguments: Mapping[str, Any]) -> tuple[str, list[str] | None]:
    """An ``ask_human`` call's question and its allowed answers (None: a free answer; an empty
    list counts as none).

    Raises:
        ToolError: the question is missing or not a string, or ``options`` is not an array of
            strings.
    """
    if not isinstance(arguments, Mapping):
        raise ToolError(f"{ASK_HUMAN} takes a JSON object of arguments")
    given = _call_arguments(arguments)
    properties = ASK_HUMAN_SPEC["function"]["parameters"]["properties"]
    question = given.get("question")
    if question is None:
        raise ToolError(f'{ASK_HUMAN} needs the argument "question": '
                        f'{properties["question"]["description"]}')
    question = _coerced(ASK_HUMAN, "question", question, "string")
    options = given.get("options")
    if options is None:
        return question, None
    if not isinstance(options, list) or not all(isinstance(option, str) for option in options):
        raise ToolError(f'{ASK_HUMAN}: argument "options" must be an array of strings, not '
                        f"{options!r:.60}")
    return question, options or None


def _coerced(tool: str, key: str, value: Any, kind: str) -> Any:
    """`value` as JSON-schema type `kind`; numbers and booleans sent as strings are accepted."""
    if kind == "string" and isinstance(value, str):
        return value
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
    if kind in ("integer", "number") and not isinstance(value, bool):
        number = _number(value)
        if number is not None and kind == "number":
            return number
        if number is not None and number.is_integer():
            return int(number)
    wanted = {"string": "a string", "integer": "an integer", "number": "a number",
              "boolean": "true or false"}[kind]
    raise ToolError(f'{tool}: argument "{key}" must be {wanted}, not {value!r:.60}')


def _number(value: Any) -> float | None:
    """`value` as a finite number, or `None`."""
    number: float | None = None
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        with contextlib.suppress(ValueError):
            number = float(value)
    return number if number is not None and math.isfinite(number) else None


# --- confinement ----------------------------------------------------------------------------

@dataclass(frozen=True)
class WorkspacePath:
    """A path argument that passed confinement."""

    real: Path
    """Every symlink resolved: what the tool opens."""
    shown: str
    """How messages name it: relative to the root ("." for the root) when it lies inside."""


class Workspace:
    """The root the agent works in and the read-only roots it may also read."""

    def __init__(self, root: Path, read_only_roots: Sequence[Path] = ()) -> None:
        self.root = Path(os.path.abspath(root))
        self._root_real = Path(os.path.realpath(root))
        self._read_only = tuple(Path(os.path.realpath(path)) for path in read_only_roots)
        # Write-protected: the read-only roots, bar one holding the whole workspace (an
        # execution folder placed inside the data), which would otherwise forbid every write.
        self._protected = tuple(base for base in self._read_only
                                if not self._root_real.is_relative_to(base))

    def resolve(self, raw: str, *, for_writing: bool = False) -> WorkspacePath:
        """`raw` (relative to the root, or absolute) after confinement.

        Raises:
            ToolError: the path, once its symlinks are followed, lies outside the root (and,
                when reading, outside every read-only root), or it is to be written and lies
                in a read-only root.
        """
        if "\0" in raw:
            raise ToolError(f"Path {raw!r} contains a NUL character")
        joined = Path(os.path.normpath(self.root / raw))  # an absolute raw replaces the root
        real = Path(os.path.realpath(self.root / raw))  # `..` after a symlink, as the OS does
        if for_writing and any(real.is_relative_to(base) for base in self._protected):
            raise ToolError(f"Path {raw} is in a read-only folder; write inside the workspace")
        readable = real.is_relative_to(self._root_real) or (
            not for_writing and any(real.is_relative_to(base) for base in self._read_only))
        if not readable:
            raise ToolError(self._outside_message(raw, joined))
        return WorkspacePath(real, self._shown(joined))

    def readable(self, real: Path) -> bool:
        """Whether a resolved path lies in the root or a read-only root."""
        return any(real.is_relative_to(base) for base in (self._root_real, *self._read_only))

    def _outside_message(self, raw: str, joined: Path) -> str:
        if joined.is_relative_to(self.root) or joined.is_relative_to(self._root_real):
            return f"Path {raw} is outside the workspace (a symlink on the way leads out of it)"
        return f"Path {raw} is outside the workspace"

    def _shown(self, joined: Path) -> str:
        for base in (self.root, self._root_real):
            if joined.is_relative_to(base):
                return joined.relative_to(base).as_posix()
        return joined.as_posix()


def _join(shown: str, name: str) -> str:
    return name if shown == "." else f"{shown}/{name}"


def _require_file(target: WorkspacePath) -> None:
    """A regular file: opening a FIFO or a device would block the agent or never end."""
    if target.real.is_dir():
        raise ToolError(f"{target.shown} is a folder, not a file; use ls to list it")
    if not target.real.exists():
        raise ToolError(f"File {target.shown} does not exist")
    if not target.real.is_file():
        raise ToolError(f"{target.shown} is not a regular file")


def _require_folder(target: WorkspacePath) -> None:
    if target.real.is_file():
        raise ToolError(f"{target.shown} is a file, not a folder; use read to see it")
    if not target.real.is_dir():
        raise ToolError(f"Folder {target.shown} does not exist")


def _looks_binary(path: Path) -> bool:
    with path.open("rb") as file:
        return b"\0" in file.read(BINARY_SNIFF_BYTES)


# --- globs ----------------------------------------------------------------------------------

def _path_matcher(pattern: str) -> Callable[[str], bool]:
    """A test for paths relative to the search folder: a pattern without "/" matches the file
    name at any depth (as pi's fd-based find does), one with "/" the whole relative path."""
    pattern = pattern.strip()
    if pattern.startswith("/"):
        raise ToolError(f"Glob {pattern} is absolute; give a relative pattern and the folder "
                        "as path")
    by_name = "/" not in pattern
    pattern = pattern.removeprefix("./")
    regex = glob_regex(pattern)  # the kernel's glob syntax, as checkpointedFiles use it
    if by_name:
        return lambda rel: regex.fullmatch(rel.rpartition("/")[2]) is not None
    return lambda rel: regex.fullmatch(rel) is not None


# --- bash output ----------------------------------------------------------------------------

class CappedOutput:
    """A command's output, keeping only as much of its head and tail as will be shown, so a
    command that prints gigabytes does not fill the memory."""

    def __init__(self, limit: int) -> None:
        self.limit = max(limit, 2)
        self.total = 0
        self._head: list[str] = []
        self._head_len = 0
        self._tail = ""

    def add(self, text: str) -> None:
        self.total += len(text)
        room = self.limit - self._head_len
        if room > 0:
            self._head.append(text[:room])
            self._head_len += len(text[:room])
            text = text[room:]
        if text:
            self._tail = (self._tail + text)[-self.limit :]

    def render(self) -> str:
        """All of it, or its first and last halves with a note saying how much was left out."""
        head = "".join(self._head)
        if self.total <= self.limit:
            return head
        head_keep = self.limit // 2
        tail_keep = self.limit - head_keep
        omitted = self.total - head_keep - tail_keep
        return (f"{head[:head_keep]}\n\n... [{omitted} characters of output left out] ...\n\n"
                f"{(head + self._tail)[-tail_keep:]}")


async def _drain(read_fd: int, sink: CappedOutput) -> None:
    """Read the command's pipe to its end (every writer gone) into `sink`."""
    loop = asyncio.get_running_loop()
    stream = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stream),
                                                os.fdopen(read_fd, "rb", buffering=0))
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    try:
        while chunk := await stream.read(65536):
            sink.add(decoder.decode(chunk))
        sink.add(decoder.decode(b"", final=True))
    finally:
        transport.close()


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _group_running(pgid: int) -> bool:
    """Whether a process of group `pgid` still runs.  Zombies do not count: where the container's
    init does not reap orphans, killed background processes stay zombies for good."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        return True  # no /proc (macOS): a zombie counts as running, which only costs the grace
    return any(_runs_in_group(stat, pgid) for stat in proc.glob("[0-9]*/stat"))


def _runs_in_group(stat_file: Path, pgid: int) -> bool:
    try:
        fields = stat_file.read_text().rpartition(")")[2].split()
    except OSError:
        return False  # ended while we looked
    return len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X")


async def _end_group(pgid: int) -> None:
    """SIGTERM to the command's process group, SIGKILL to what still runs after the grace."""
    if not _group_running(pgid):
        return
    _signal_group(pgid, signal.SIGTERM)
    try:
        await _until_ended(pgid, KILL_GRACE_S)
    finally:  # also when cancelled during the grace
        if _group_running(pgid):
            _signal_group(pgid, signal.SIGKILL)
    await _until_ended(pgid, KILL_GRACE_S)  # SIGKILL is prompt, bar a process stuck in the kernel


async def _until_ended(pgid: int, timeout_s: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while _group_running(pgid) and loop.time() < deadline:
        await asyncio.sleep(0.05)


async def _exited_within(process: asyncio.subprocess.Process, timeout_s: float) -> bool:
    try:
        await asyncio.wait_for(process.wait(), timeout_s)
    except TimeoutError:
        return False
    return True


async def _finish_reading(reader: asyncio.Task[None]) -> None:
    """Let the reader take the output left in the pipe; give up on a process that escaped the
    group (``setsid``) and still holds it open."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(reader, DRAIN_GRACE_S)


def _exit_note(returncode: int) -> str:
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"[killed by signal {signal.Signals(-returncode).name}]"
    return f"[exit code {returncode}]"


def _find_shell(env: Mapping[str, str]) -> str:
    return shutil.which("bash", path=env.get("PATH")) or shutil.which("bash") or "/bin/sh"


# --- the tools ------------------------------------------------------------------------------

class Toolbox:
    """The seven tools, bound to one workspace and one environment."""

    def __init__(self, root: Path, *, env: Mapping[str, str],
                 read_only_roots: Sequence[Path] = (), bash_timeout_s: float = 120.0,
                 max_output_chars: int = 30_000, sandbox: Sandbox | None = None) -> None:
        """
        Args:
            root: the workspace root (the codon's agentRoot); bash runs here.
            env: the whole environment bash commands get (nothing is inherited).
            sandbox: bash commands run inside it (the file tools confine themselves), with
                no network unless the settings say ``all``.
            read_only_roots: folders read, grep, find and ls may also reach (through a symlink
                in the root or by absolute path) and write and edit never may.
            bash_timeout_s: a command's timeout when the model gives none.
            max_output_chars: how much of a command's output the model sees.
        """
        self.workspace = Workspace(root, read_only_roots)
        self.env = dict(env)
        self.sandbox = sandbox
        self.bash_timeout_s = bash_timeout_s
        self.max_output_chars = max_output_chars
        self._shell = _find_shell(self.env)
        self._tools: dict[str, Callable[..., Awaitable[str]]] = {
            "read": self._read, "write": self._write, "edit": self._edit, "bash": self._bash,
            "grep": self._grep, "find": self._find, "ls": self._ls,
        }

    async def run(self, name: str, arguments: Mapping[str, Any]) -> ToolOutcome:
        """Run tool `name` (pi name) with the model's arguments. Never raises for a bad call
        (unknown tool, missing/ill-typed argument, ToolError): returns an error outcome whose text
        the model can act on. Cancellation propagates (after killing a bash process group)."""
        tool = self._tools.get(name)
        if tool is None:
            return ToolOutcome(f"Unknown tool {name!r}; the tools are {', '.join(self._tools)}",
                               is_error=True)
        if not isinstance(arguments, Mapping):
            return ToolOutcome(f"{name} takes a JSON object of arguments", is_error=True)
        try:
            return ToolOutcome(await tool(**_checked_arguments(name, arguments)))
        except ToolError as error:
            return ToolOutcome(str(error), is_error=True)
        except OSError as error:
            return ToolOutcome(f"{name} failed: {_os_error_text(error)}", is_error=True)
        except UnicodeError as error:
            return ToolOutcome(f"{name} failed: {error}", is_error=True)

    # read, write, edit

    async def _read(self, path: str, offset: int = 1, limit: int = READ_LINE_LIMIT) -> str:
        if offset < 0 or limit < 1:
            raise ToolError("offset must be 1 or more and limit 1 or more")
        target = self.workspace.resolve(path)
        _require_file(target)
        if _looks_binary(target.real):
            raise ToolError(f"{target.shown} is a binary file; read shows text files only")
        return _numbered_lines(target, max(offset, 1), limit)

    async def _write(self, path: str, content: str) -> str:
        target = self.workspace.resolve(path, for_writing=True)
        existed = target.real.exists()
        if existed:
            _require_file(target)
        try:
            target.real.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as error:
            raise ToolError(f"Cannot write {target.shown}: part of its folder path is a "
                            "file") from error
        with target.real.open("w", encoding="utf-8", newline="") as file:
            file.write(content)
        lines = _line_count(content)
        done = "overwrote the previous content" if existed else "new file"
        return f"Wrote {_count(lines, 'line')} to {target.shown} ({done})"

    async def _edit(self, path: str, old_text: str, new_text: str) -> str:
        if not old_text:
            raise ToolError("old_text is empty; to create or replace a whole file, use write")
        if old_text == new_text:
            raise ToolError("old_text and new_text are the same; the edit would change nothing")
        target = self.workspace.resolve(path, for_writing=True)
        _require_file(target)
        text = _text_to_edit(target)
        count = _occurrences(text, old_text)
        if count == 0:
            raise ToolError(f"old_text not found in {target.shown}; it must match the file "
                            "exactly, whitespace included (read the file to copy it)")
        if count > 1:
            raise ToolError(f"old_text matches {count} places in {target.shown}; include more "
                            "context to make it unique")
        at = text.index(old_text)
        with target.real.open("w", encoding="utf-8", newline="") as file:
            file.write(text[:at] + new_text + text[at + len(old_text) :])
        line = text.count("\n", 0, at) + 1
        return f"Edited {target.shown} at line {line}"

    # bash

    async def _bash(self, command: str, timeout: float | None = None) -> str:
        timeout_s = min(self.bash_timeout_s if timeout is None else timeout, BASH_MAX_TIMEOUT_S)
        if timeout_s <= 0:
            raise ToolError("timeout must be a positive number of seconds")
        output = CappedOutput(self.max_output_chars)
        process, reader = await self._start(command, output)
        try:
            exited = await _exited_within(process, timeout_s)
        finally:  # on timeout, on cancellation, and for what the command left in the background
            await _end_group(process.pid)
            await _finish_reading(reader)
        return _command_result(output.render().rstrip("\n"), exited, timeout_s,
                               await process.wait())

    async def _start(self, command: str, output: CappedOutput
                     ) -> tuple[asyncio.subprocess.Process, asyncio.Task[None]]:
        """The shell, in a session of its own, writing stdout and stderr into one pipe of ours.

        Not asyncio's pipes: with them ``wait()`` also waits for every background process that
        inherited the pipe, so the shell's exit would go unnoticed.
        """
        argv = [self._shell, "-c", command]
        if self.sandbox is not None:
            argv = self.sandbox.wrap(argv, path_env=self.env.get("PATH"))
        read_fd, write_fd = os.pipe()
        try:
            process = await asyncio.create_subprocess_exec(
                *argv, cwd=self.workspace.root, env=self.env,
                stdin=asyncio.subprocess.DEVNULL, stdout=write_fd, stderr=write_fd,
                start_new_session=True,
            )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)  # the shell has its own copy; EOF comes when its group is done
        return process, asyncio.create_task(_drain(read_fd, output))

    # grep, find, ls

    async def _grep(self, pattern: str, path: str = "", glob: str | None = None,
                    ignore_case: bool = False) -> str:
        try:
            regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
        except re.error as error:
            raise ToolError(f"Invalid regex {pattern!r}: {error}") from error
        target = self.workspace.resolve(path)
        selects = _path_matcher(glob) if glob else None
        matches: list[str] = []
        for real, rel, shown in self._files(target):
            if selects is None or selects(rel):
                matches.extend(_matching_lines(real, shown, regex, GREP_MATCH_LIMIT + 1 -
                                               len(matches)))
            if len(matches) > GREP_MATCH_LIMIT:
                return "\n".join([*matches[:GREP_MATCH_LIMIT],
                                  f"... (stopped at {GREP_MATCH_LIMIT} matches; narrow the "
                                  "pattern, path or glob to see the rest)"])
        return "\n".join(matches) or f"No matches for {pattern!r} in {target.shown}"

    async def _find(self, pattern: str, path: str = "") -> str:
        matches = _path_matcher(pattern)
        target = self.workspace.resolve(path)
        _require_folder(target)
        found = sorted(shown for _, rel, shown in self._walk(target.real, ".", target.shown)
                       if matches(rel))
        if not found:
            return f"No files match {pattern} in {target.shown}"
        return _capped_list(found, FIND_RESULT_LIMIT, "paths", "narrow the pattern or path")

    async def _ls(self, path: str = "") -> str:
        target = self.workspace.resolve(path)
        _require_folder(target)
        with os.scandir(target.real) as entries:
            names = sorted(filter(None, (self._ls_name(entry) for entry in entries)))
        if not names:
            return f"({target.shown} is empty)"
        return _capped_list(names, LS_ENTRY_LIMIT, "entries", "use find or grep to narrow down")

    def _ls_name(self, entry: os.DirEntry[str]) -> str | None:
        if entry.is_symlink():
            real = Path(os.path.realpath(entry.path))
            if not self.workspace.readable(real):
                return None
            return entry.name + "/" if real.is_dir() else entry.name
        return entry.name + "/" if entry.is_dir(follow_symlinks=False) else entry.name

    def _files(self, target: WorkspacePath) -> Iterator[tuple[Path, str, str]]:
        """The files a search covers: the target itself, or every file below it."""
        if target.real.is_file():
            yield target.real, target.real.name, target.shown
        else:
            _require_folder(target)
            yield from self._walk(target.real, ".", target.shown)

    def _walk(self, folder: Path, rel: str, shown: str) -> Iterator[tuple[Path, str, str]]:
        """Every file below `folder` as (real path, path relative to the search folder, path as
        shown), in name order; symlinked files only when they lead into a readable root, and
        symlinked folders never (no loops, no leaving the root, no straying into the data)."""
        try:
            with os.scandir(folder) as scan:
                entries = sorted(scan, key=lambda entry: entry.name)
        except OSError:
            return  # unreadable or vanished: a search reports what it can reach
        for entry in entries:
            entry_rel, entry_shown = _join(rel, entry.name), _join(shown, entry.name)
            if entry.is_symlink():
                real = Path(os.path.realpath(entry.path))
                if real.is_file() and self.workspace.readable(real):
                    yield real, entry_rel, entry_shown
            elif entry.is_dir(follow_symlinks=False):
                if entry.name not in SKIPPED_DIRS:
                    yield from self._walk(Path(entry.path), entry_rel, entry_shown)
            elif entry.is_file(follow_symlinks=False):
                yield Path(entry.path), entry_rel, entry_shown


# --- formatting -----------------------------------------------------------------------------

def _numbered_lines(target: WorkspacePath, offset: int, limit: int) -> str:
    """Lines `offset`..`offset + limit - 1` in `cat -n` style, then how to read on."""
    shown: list[str] = []
    budget = READ_MAX_CHARS
    count = 0
    with target.real.open("rb") as file:
        for number, raw in enumerate(file, start=1):
            count = number
            if number < offset or len(shown) >= limit or budget <= 0:
                continue
            line = _cut(raw.decode("utf-8", errors="replace").rstrip("\n"), READ_LINE_CHARS)
            budget -= len(line) + 8
            if budget >= 0 or not shown:
                shown.append(f"{number:>6}\t{line}")
    if count == 0:
        return f"({target.shown} is empty)"
    if offset > count:
        raise ToolError(f"offset {offset} is past the end of {target.shown}, which has "
                        f"{count} lines")
    following = count - (offset + len(shown) - 1)
    if following > 0:
        shown.append(f"... ({_count(following, 'more line')}; read with "
                     f"offset={offset + len(shown)})")
    return "\n".join(shown)


def _line_count(text: str) -> int:
    """Lines as an editor counts them: a final newline ends the last line, it starts none."""
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def _os_error_text(error: OSError) -> str:
    if error.strerror and error.filename:
        return f"{error.strerror}: {error.filename}"
    return error.strerror or str(error)


def _cut(line: str, limit: int) -> str:
    if len(line) <= limit:
        return line
    return f"{line[:limit]} ... (line cut: {len(line)} characters in all)"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _text_to_edit(target: WorkspacePath) -> str:
    """The file's text, exactly (line endings kept); refuses what is not UTF-8 text, which
    rewriting would damage."""
    data = target.real.read_bytes()
    if b"\0" in data[:BINARY_SNIFF_BYTES]:
        raise ToolError(f"{target.shown} is a binary file; edit changes text files only")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ToolError(f"{target.shown} is not UTF-8 text; edit would damage it") from error


def _occurrences(text: str, part: str) -> int:
    """How many places `part` occurs at, overlapping ones included: an edit there would be
    ambiguous too."""
    count, at = 0, text.find(part)
    while at != -1:
        count += 1
        at = text.find(part, at + 1)
    return count


def _matching_lines(real: Path, shown: str, regex: re.Pattern[str], limit: int) -> list[str]:
    if limit <= 0 or _looks_binary(real):
        return []
    found: list[str] = []
    with real.open("rb") as file:
        for number, raw in enumerate(file, start=1):
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if regex.search(line):
                found.append(f"{shown}:{number}: {_cut(line, GREP_LINE_CHARS)}")
                if len(found) >= limit:
                    break
    return found


def _capped_list(items: list[str], limit: int, noun: str, advice: str) -> str:
    if len(items) <= limit:
        return "\n".join(items)
    return "\n".join([*items[:limit], f"... ({limit} of {len(items)} {noun} shown; {advice})"])


def _command_result(output: str, exited: bool, timeout_s: float, returncode: int) -> str:
    """The model's view of a finished command; a failure raises, so it is an error outcome."""
    if not exited:
        raise ToolError(f"Command timed out after {timeout_s:g} s and was killed. "
                        + (f"Output so far:\n{output}" if output else "It printed nothing."))
    if returncode != 0:
        raise ToolError(f"{output}\n{_exit_note(returncode)}" if output else
                        _exit_note(returncode))
    return output or "(no output)"
