"""``requirements.tools``: the programs a hank needs on ``PATH``, and how new they must be.

Each entry is a program name, optionally with version constraints (Hankweave 0.12 takes bare
names; the constraints are a hankweave addition):

```json
"requirements": {"tools": ["jq", "git>=2.30", "node>=18,<23"]}
```

A name is looked up on the ``PATH`` agents get (an executable regular file, as a shell would
find it); nothing from the hank runs. With a constraint, the program found is asked
``<path> --version`` (10 s, no input) and the first ``N.N[.N]`` it prints is compared. Every
problem says what was looked for, where, and what was found, so a person can reproduce it.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ToolRequirement", "check_required_tools", "parse_tool_requirement"]

_SPEC = re.compile(r"^\s*(?P<name>[^\s<>=!~,/\\]+)\s*(?P<constraints>(?:[<>=!~].*)?)$")
_CONSTRAINT = re.compile(r"^\s*(?P<op>>=|<=|==|!=|>|<)\s*(?P<version>\d+(?:\.\d+){0,2})\s*$")
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
PROBE_TIMEOUT_S = 10

Version = tuple[int, int, int]


@dataclass(frozen=True)
class ToolRequirement:
    """One parsed ``requirements.tools`` entry."""

    name: str
    constraints: tuple[tuple[str, Version, str], ...] = ()
    """(operator, version, as written)."""

    @property
    def wanted(self) -> str:
        return ",".join(f"{op}{text}" for op, _, text in self.constraints)

    def satisfied_by(self, version: Version) -> bool:
        checks = {">=": version.__ge__, "<=": version.__le__, "==": version.__eq__,
                  "!=": version.__ne__, ">": version.__gt__, "<": version.__lt__}
        return all(checks[op](wanted) for op, wanted, _ in self.constraints)


def _version(text: str) -> Version:
    parts = [int(p) for p in text.split(".")] + [0, 0]
    return parts[0], parts[1], parts[2]


def parse_tool_requirement(entry: str) -> ToolRequirement:
    """The requirement ``entry`` spells (``"git>=2.30,<3"``).

    Raises:
        ValueError: a message for the hank's validation error.
    """
    match = _SPEC.match(entry)
    if not match or not entry.strip():
        raise ValueError(f"{entry!r} is not a tool requirement: give a program name (no spaces"
                         " or slashes), optionally with versions, like \"git>=2.30\" or"
                         " \"node>=18,<23\"")
    constraints = []
    text = match.group("constraints").strip()
    for part in text.split(",") if text else []:
        found = _CONSTRAINT.match(part)
        if not found:
            raise ValueError(f"{entry!r}: {part.strip()!r} is not a version constraint (use"
                             " >=, >, <=, <, == or != and a version like 2.30)")
        constraints.append((found.group("op"), _version(found.group("version")),
                            found.group("version")))
    return ToolRequirement(match.group("name"), tuple(constraints))


def check_required_tools(entries: list[str], env: Mapping[str, str]) -> list[str]:
    """A problem per entry of ``requirements.tools`` that ``env``'s ``PATH`` does not meet."""
    path = env.get("PATH", os.defpath)
    problems = []
    for entry in entries:
        requirement = parse_tool_requirement(entry)
        found = _which(requirement.name, path)
        if found is None:
            problems.append(f"{requirement.name}: not found on PATH (looked for an executable"
                            f" file named {requirement.name} in {path})")
            continue
        if requirement.constraints:
            problem = _version_problem(requirement, found, env)
            if problem:
                problems.append(problem)
    return problems


def _which(name: str, path: str) -> str | None:
    for folder in path.split(os.pathsep):
        candidate = os.path.join(folder or ".", name)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def _version_problem(requirement: ToolRequirement, found: str,
                     env: Mapping[str, str]) -> str | None:
    probe = f"{found} --version"
    try:
        result = subprocess.run([found, "--version"], capture_output=True, text=True,
                                errors="replace", timeout=PROBE_TIMEOUT_S,
                                stdin=subprocess.DEVNULL, env=dict(env), check=False)
    except subprocess.TimeoutExpired:
        return (f"{requirement.name}{requirement.wanted}: `{probe}` gave no answer in"
                f" {PROBE_TIMEOUT_S}s, so its version is unknown")
    except OSError as exc:
        return f"{requirement.name}{requirement.wanted}: `{probe}` could not run: {exc.strerror}"
    output = (result.stdout + "\n" + result.stderr).strip()
    match = _VERSION.search(output)
    first_line = output.splitlines()[0][:120] if output else ""
    if match is None:
        return (f"{requirement.name}{requirement.wanted}: `{probe}` printed no version number"
                f" ({first_line!r})")
    version = (int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))
    if requirement.satisfied_by(version):
        return None
    shown = match.group(0)
    return (f"{requirement.name}{requirement.wanted}: {found} is version {shown} (from"
            f" `{probe}`: {first_line!r}), which does not meet {requirement.wanted}")
