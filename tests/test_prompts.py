"""Prompt assembly: frontmatter, template variables, comments, system and extension prompts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hankweave.config import Codon, HankFile, parse_hank
from hankweave.config.prompts import (
    PromptFileError,
    PromptFrontmatterError,
    PromptMetadata,
    build_extension_prompt,
    build_system_prompt,
    build_user_prompt,
    parse_frontmatter,
    strip_html_comments,
    substitute_template_variables,
)

AGENT_ROOT = Path("/exec/agentRoot")


def codon(**fields: Any) -> dict[str, Any]:
    return {"id": "a", "name": "A", "model": "sonnet", "continuationMode": "fresh", **fields}


def parse(**root: Any) -> HankFile:
    items = root.pop("items", None) or [codon(promptText="Go.")]
    return parse_hank({"hank": items, **root})


def only_codon(h: HankFile) -> Codon:
    item = h.hank[0]
    assert isinstance(item, Codon)
    return item


# --- frontmatter ------------------------------------------------------------------------------


def test_frontmatter_is_parsed_and_stripped() -> None:
    text = (
        "---\n"
        "# a comment line\n"
        "name: Code Analyzer\n"
        'description: "Analyzes code: patterns"\n'
        "tags: [analysis, 'code-review', \"x\"]\n"
        "version: 1.0\n"
        "author:\n"
        "\n"
        "---\n\n"
        "  The body.  \n"
    )

    parsed = parse_frontmatter(text)

    assert parsed.body == "The body."
    assert parsed.metadata == PromptMetadata(
        name="Code Analyzer",
        description="Analyzes code: patterns",
        tags=["analysis", "code-review", "x"],
        version="1.0",
    )


def test_text_without_frontmatter_is_untouched() -> None:
    parsed = parse_frontmatter("  Plain text.\n")

    assert (parsed.body, parsed.metadata) == ("  Plain text.\n", None)


def test_frontmatter_must_start_at_the_first_byte() -> None:
    text = "\n---\nname: x\n---\nbody"

    assert parse_frontmatter(text).body == text


def test_without_a_closing_delimiter_the_whole_text_is_the_prompt() -> None:
    text = "---\nname: x\nbody without end"

    parsed = parse_frontmatter(text)

    assert (parsed.body, parsed.metadata) == (text, None)


def test_closing_delimiter_is_the_next_triple_dash_anywhere() -> None:
    parsed = parse_frontmatter("---\nname: x --- rest of line\nmore")

    assert parsed.metadata == PromptMetadata(name="x")
    assert parsed.body == "rest of line\nmore"


def test_empty_inline_array_is_an_empty_tag_list() -> None:
    assert parse_frontmatter("---\ntags: []\n---\nb").metadata == PromptMetadata(tags=[])


def test_unknown_frontmatter_key_is_an_error_naming_the_file() -> None:
    with pytest.raises(PromptFrontmatterError) as caught:
        parse_frontmatter("---\nname: x\nmodel: opus\ntemperature: 1\n---\nbody", "prompts/a.md")

    assert str(caught.value) == (
        "Invalid prompt frontmatter in prompts/a.md:\n"
        "Unknown frontmatter field(s): model, temperature. "
        "Allowed fields: name, description, tags, version, author"
    )


def test_frontmatter_values_of_the_wrong_type_are_errors() -> None:
    with pytest.raises(PromptFrontmatterError) as caught:
        parse_frontmatter("---\ntags: solo\nname: [a, b]\n---\nbody", "p.md")

    message = str(caught.value)
    assert "tags: must be an inline array" in message
    assert "name: must be a single value, not an array" in message


# --- templates and comments -------------------------------------------------------------------


def test_every_template_variable_is_substituted_literally() -> None:
    text = "<%AGENT_ROOT%> <%PROJECT_DIR%> <%EXECUTION_DIR%> <%DATA_DIR%> <%agent_root%>"

    assert substitute_template_variables(text, AGENT_ROOT) == (
        "/exec/agentRoot /exec/agentRoot /exec/agentRoot "
        "/exec/agentRoot/read_only_data_source <%agent_root%>"
    )


def test_html_comments_are_removed_non_greedily_with_one_following_newline() -> None:
    text = "a<!-- one -->\r\n\nb <!-- two\nlines -->c<!-- three -->\n\nd"

    assert strip_html_comments(text) == "a\nb c\nd"


# --- user prompts -----------------------------------------------------------------------------


def test_prompt_text_is_used_as_is_without_frontmatter_parsing() -> None:
    h = parse(items=[codon(promptText="---\nname: x\n---\nIn <%DATA_DIR%><!-- note -->")])

    prompt = build_user_prompt(only_codon(h), Path("/hank"), AGENT_ROOT)

    assert prompt.text == "---\nname: x\n---\nIn /exec/agentRoot/read_only_data_source"
    assert prompt.metadata is None


def test_prompt_files_are_joined_and_only_the_first_frontmatter_is_kept(tmp_path: Path) -> None:
    (tmp_path / "one.md").write_text("---\nname: First\n---\nStep one in <%AGENT_ROOT%>.\n")
    (tmp_path / "two.md").write_text("---\nname: Second\n---\n<!-- hidden -->\nStep two.")
    h = parse(items=[codon(promptFile=["one.md", "two.md"], promptText="ignored")])

    prompt = build_user_prompt(only_codon(h), tmp_path, AGENT_ROOT)

    assert prompt.text == "Step one in /exec/agentRoot.\n\nStep two."
    assert prompt.metadata == PromptMetadata(name="First")


def test_a_single_prompt_file_without_frontmatter_keeps_its_text(tmp_path: Path) -> None:
    (tmp_path / "p.md").write_text("Hello\n")
    h = parse(items=[codon(promptFile="p.md")])

    prompt = build_user_prompt(only_codon(h), tmp_path, AGENT_ROOT)

    assert (prompt.text, prompt.metadata) == ("Hello\n", None)


def test_invalid_frontmatter_in_a_prompt_file_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "bad.md").write_text("---\ncolour: red\n---\nx")
    h = parse(items=[codon(promptFile="bad.md")])

    with pytest.raises(PromptFrontmatterError, match=r"in bad\.md"):
        build_user_prompt(only_codon(h), tmp_path, AGENT_ROOT)


def test_missing_prompt_file_is_a_clear_error(tmp_path: Path) -> None:
    h = parse(items=[codon(promptFile="gone.md")])

    with pytest.raises(PromptFileError, match=r'Cannot read prompt file "gone.md"'):
        build_user_prompt(only_codon(h), tmp_path, AGENT_ROOT)


# --- system and extension prompts -------------------------------------------------------------


def test_system_prompt_joins_global_files_and_codon_text(tmp_path: Path) -> None:
    (tmp_path / "g1.md").write_text("Global one.")
    (tmp_path / "g2.md").write_text("Global two <!-- x -->in <%PROJECT_DIR%>.")
    h = parse(
        globalSystemPromptFile=["g1.md", "g2.md"],
        items=[codon(promptText="Go.", appendSystemPromptText="Codon part.")],
    )

    system = build_system_prompt(h, only_codon(h), tmp_path, AGENT_ROOT)

    assert system == "Global one.\n\nGlobal two in /exec/agentRoot.\n\nCodon part."


def test_system_prompt_from_global_text_and_codon_files(tmp_path: Path) -> None:
    (tmp_path / "s.md").write_text("From file.")
    h = parse(
        globalSystemPromptText="Global.",
        items=[codon(promptText="Go.", appendSystemPromptFile=["s.md", "s.md"])],
    )

    system = build_system_prompt(h, only_codon(h), tmp_path, AGENT_ROOT)

    assert system == "Global.\n\nFrom file.\n\nFrom file."


def test_system_prompt_is_none_when_nothing_is_set(tmp_path: Path) -> None:
    h = parse()

    assert build_system_prompt(h, only_codon(h), tmp_path, AGENT_ROOT) is None


def test_extension_prompt_gets_templates_and_comment_stripping_only() -> None:
    text = "---\nname: x\n---\nContinue in <%EXECUTION_DIR%>.<!-- why -->\nDone."

    assert build_extension_prompt(text, AGENT_ROOT) == (
        "---\nname: x\n---\nContinue in /exec/agentRoot.Done."
    )
