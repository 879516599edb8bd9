"""Prompt assembly: the text a codon's agent receives (docs/behaviour.md §1.14).

* **User prompt**: the `promptFile` files, each with its frontmatter parsed and stripped, joined
  with a blank line (or `promptText` as is); then template variables; then HTML comments.
* **System prompt**: the global part (`globalSystemPromptFile` / `globalSystemPromptText`) and
  the codon part (`appendSystemPromptFile` / `appendSystemPromptText`) joined with a blank line;
  then template variables and comments. `None` when neither is set.
* **Extension prompt** (`exhaustWithPrompt`): template variables and comments only.

Template variables are literal, case-sensitive tokens: `<%AGENT_ROOT%>`, its silent aliases
`<%PROJECT_DIR%>` and `<%EXECUTION_DIR%>` (all the absolute `agentRoot`), and `<%DATA_DIR%>`
(`agentRoot/read_only_data_source`). No other templating applies.

Frontmatter is metadata only, with a strict set of keys; a problem in it is an error naming the
file, raised when the prompt is built (as in Hankweave 0.10.0, validation does not read it).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from hankweave.config.errors import ConfigError
from hankweave.config.hank import Codon, HankFile
from hankweave.config.refs import resolve_ref
from hankweave.workspace import DATA_LINK

FRONTMATTER_DELIMITER = "---"
ALLOWED_FRONTMATTER_KEYS = ("name", "description", "tags", "version", "author")

_COMMENT = re.compile(r"<!--[\s\S]*?-->(?:\r?\n)?")


class PromptFrontmatterError(ConfigError):
    """A prompt file's frontmatter has unknown keys or values of the wrong type."""


class PromptFileError(ConfigError):
    """A prompt file cannot be read."""


class PromptMetadata(BaseModel):
    """The frontmatter of a prompt file: labels for people and tools, never configuration."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: str | None = None
    description: str | None = None
    tags: list[str] | None = None
    """Must be an inline array: `tags: [analysis, review]`."""
    version: str | None = None
    """Always a string: `version: 1.0` is `"1.0"`."""
    author: str | None = None


@dataclass(frozen=True)
class ParsedPrompt:
    """A prompt file's text with its frontmatter removed."""

    body: str
    metadata: PromptMetadata | None
    """`None` when the file has no frontmatter."""


@dataclass(frozen=True)
class UserPrompt:
    """The user prompt of a codon, ready to send."""

    text: str
    metadata: PromptMetadata | None
    """The first prompt file's frontmatter (reported as `promptMetadata` in `codon.started`)."""


# --------------------------------------------------------------------------------------------
# Frontmatter
# --------------------------------------------------------------------------------------------


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        return text[1:-1]
    return text


def _parse_value(raw: str) -> str | list[str] | None:
    value = raw.strip()
    if value.startswith("[") and value.endswith("]"):
        inner = value[1:-1]
        if not inner.strip():
            return []
        return [_unquote(item.strip()) for item in inner.split(",")]
    value = _unquote(value)
    return value or None


def parse_frontmatter(text: str, source: str = "prompt") -> ParsedPrompt:
    """Split `text` into frontmatter and body, with Hankweave 0.10.0's rules.

    Frontmatter exists only when the text starts with `---` at its very first byte and another
    `---` follows anywhere after it; the body is what follows that, trimmed. Without a closing
    delimiter the whole text is the body, untouched. Lines are `key: value`; blank lines, `#`
    lines and lines without `:` are skipped, `[a, b]` is an array, quotes are removed, empty
    values are dropped.

    Raises:
        PromptFrontmatterError: unknown keys or wrong types; the message names `source`.
    """
    if not text.startswith(FRONTMATTER_DELIMITER):
        return ParsedPrompt(text, None)
    end = text.find(FRONTMATTER_DELIMITER, len(FRONTMATTER_DELIMITER))
    if end == -1:
        return ParsedPrompt(text, None)
    header = text[len(FRONTMATTER_DELIMITER) : end]
    body = text[end + len(FRONTMATTER_DELIMITER) :].strip()
    data: dict[str, str | list[str]] = {}
    for line in header.strip().split("\n"):
        line = line.strip()
        if not line or line.startswith("#") or ":" not in line:
            continue
        key, _, raw = line.partition(":")
        value = _parse_value(raw)
        if value is not None:
            data[key.strip()] = value
    return ParsedPrompt(body, _validate_metadata(data, source))


def _validate_metadata(data: dict[str, str | list[str]], source: str) -> PromptMetadata:
    unknown = [key for key in data if key not in ALLOWED_FRONTMATTER_KEYS]
    problems: list[str] = []
    if unknown:
        problems.append(
            f"Unknown frontmatter field(s): {', '.join(unknown)}. "
            f"Allowed fields: {', '.join(ALLOWED_FRONTMATTER_KEYS)}"
        )
    for key in ALLOWED_FRONTMATTER_KEYS:
        if key not in data:
            continue
        if key == "tags" and not isinstance(data[key], list):
            problems.append("tags: must be an inline array, e.g. tags: [analysis, review]")
        elif key != "tags" and not isinstance(data[key], str):
            problems.append(f"{key}: must be a single value, not an array")
    if problems:
        raise PromptFrontmatterError(
            f"Invalid prompt frontmatter in {source}:\n" + "\n".join(problems)
        )
    try:
        return PromptMetadata.model_validate(data)
    except ValidationError as exc:  # pragma: no cover - the checks above cover every type
        raise PromptFrontmatterError(f"Invalid prompt frontmatter in {source}:\n{exc}") from None


# --------------------------------------------------------------------------------------------
# Templates and comments
# --------------------------------------------------------------------------------------------


def template_values(agent_root: Path) -> dict[str, str]:
    """The template variables for a workspace at `agent_root` (made absolute)."""
    root = agent_root.absolute()
    return {
        "<%AGENT_ROOT%>": str(root),
        "<%PROJECT_DIR%>": str(root),
        "<%EXECUTION_DIR%>": str(root),
        "<%DATA_DIR%>": str(root / DATA_LINK),
    }


def substitute_template_variables(text: str, agent_root: Path) -> str:
    """Replace every template variable token in `text` (literal, case-sensitive)."""
    for token, value in template_values(agent_root).items():
        text = text.replace(token, value)
    return text


def strip_html_comments(text: str) -> str:
    """Remove every `<!-- ... -->` (non-greedy, across lines) and one newline right after it."""
    return _COMMENT.sub("", text)


def _finish(text: str, agent_root: Path) -> str:
    return strip_html_comments(substitute_template_variables(text, agent_root))


# --------------------------------------------------------------------------------------------
# Building prompts
# --------------------------------------------------------------------------------------------


def _as_list(value: str | list[str] | None) -> list[str]:
    if value is None or value == "":
        return []
    return [value] if isinstance(value, str) else list(value)


def read_prompt_file(hank_dir: Path, ref: str) -> str:
    """Read the file a hank ref names, as UTF-8.

    Raises:
        PromptFileError: the file is missing, unreadable or not UTF-8.
    """
    path = resolve_ref(hank_dir.absolute(), ref)
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise PromptFileError(
            f'Prompt file "{ref}" ({path}) is not valid UTF-8 (byte offset {exc.start})'
        ) from None
    except OSError as exc:
        raise PromptFileError(
            f'Cannot read prompt file "{ref}" ({path}): {exc.strerror or exc}'
        ) from None


def _join_files(hank_dir: Path, refs: Sequence[str]) -> str:
    return "\n\n".join(read_prompt_file(hank_dir, ref) for ref in refs)


def build_user_prompt(codon: Codon, hank_dir: Path, agent_root: Path) -> UserPrompt:
    """The user prompt of `codon`; `promptFile` wins over `promptText` when both are set.

    Raises:
        PromptFileError: a prompt file cannot be read.
        PromptFrontmatterError: a prompt file's frontmatter is invalid.
    """
    refs = _as_list(codon.prompt_file)
    if refs:
        parts: list[str] = []
        metadata: PromptMetadata | None = None
        for position, ref in enumerate(refs):
            parsed = parse_frontmatter(read_prompt_file(hank_dir, ref), source=ref)
            if position == 0:
                metadata = parsed.metadata
            parts.append(parsed.body)
        text = "\n\n".join(parts)
    else:
        text = codon.prompt_text or ""
        metadata = None
    return UserPrompt(_finish(text, agent_root), metadata)


def global_system_prompt(hank: HankFile, hank_dir: Path) -> str | None:
    """The raw global system prompt (files joined with a blank line), before substitution."""
    refs = _as_list(hank.global_system_prompt_file)
    if refs:
        return _join_files(hank_dir, refs)
    return hank.global_system_prompt_text


def build_system_prompt(
    hank: HankFile, codon: Codon, hank_dir: Path, agent_root: Path
) -> str | None:
    """The system prompt appended for `codon`: the global part, then the codon's part.

    `None` when neither part is set (or both are empty).

    Raises:
        PromptFileError: a system prompt file cannot be read.
    """
    refs = _as_list(codon.append_system_prompt_file)
    codon_part = _join_files(hank_dir, refs) if refs else codon.append_system_prompt_text
    parts = [part for part in (global_system_prompt(hank, hank_dir), codon_part) if part]
    if not parts:
        return None
    return _finish("\n\n".join(parts), agent_root)


def build_extension_prompt(text: str, agent_root: Path) -> str:
    """An `exhaustWithPrompt` prompt: template variables and comments only (no frontmatter)."""
    return _finish(text, agent_root)
