"""Sentinel prompt templates: Eta run as JavaScript in the sandbox, plain Jinja2, their errors."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime

import pytest

from hankweave.sentinels.jsvalues import js_number_str
from hankweave.sentinels.templates import (
    MAX_TEMPLATE_EVENTS,
    PromptTemplate,
    TemplateRenderError,
    TemplateSyntaxError,
    render_sentinel_prompt,
    sentinel_prompt_context,
)

START = datetime(2025, 1, 19, 9, 0, tzinfo=UTC)
NOW = datetime(2025, 1, 19, 10, 0, tzinfo=UTC)
CODON = {"id": "build-1", "name": "Narrator", "description": "Tells the story",
         "startTime": START}
EVENTS = [
    {"id": "evt-1", "type": "assistant.action",
     "data": {"action": "tool_use", "toolName": "Read", "toolInput": {"file_path": "a.ts"}}},
    {"id": "evt-2", "type": "tool.result",
     "data": {"toolName": "Read", "isError": False, "executionTimeMs": 45, "cost": 1.0}},
    {"id": "evt-3", "type": "error",
     "data": {"message": "Something went wrong", "severity": "operation"}},
]


def render(source: str, events: list[dict] | None = None) -> str:
    return render_sentinel_prompt(source, events=EVENTS if events is None else events,
                                  codon=CODON, current_time=NOW)


# --- Eta: the forms real configs use -----------------------------------------------------------

def test_eta_interpolates_member_access_and_length():
    assert render("Found <%= it.events.length %> events for <%= it.codon.name %>") \
        == "Found 3 events for Narrator"


def test_eta_interpolates_index_and_nested_members():
    assert render("Tool: <%= it.events[0].data.toolInput.file_path %>, "
                  "<%= it.events[1]['data'].toolName %>") == "Tool: a.ts, Read"


def test_eta_for_of_loop_drops_the_newline_after_every_tag():
    source = "Events:\n<% for (const e of it.events) { %>\n- <%= e.type %>\n\n<% } %>\nDone"
    assert render(source) == "Events:\n- assistant.action\n- tool.result\n- error\nDone"


def test_eta_for_each_with_function_callback_and_index():
    source = "<% it.events.forEach(function(e, i) { %><%= i %>=<%= e.id %> <% }) %>"
    assert render(source) == "0=evt-1 1=evt-2 2=evt-3 "


def test_eta_for_each_with_arrow_callback():
    assert render("<% it.events.forEach((e) => { %>[<%= e.id %>]<% }); %>") \
        == "[evt-1][evt-2][evt-3]"


def test_eta_if_else_if_else():
    source = ("<% if (it.events.length === 0) { %>\nnone\n"
              "<% } else if (it.events.length > 2) { %>\nmany\n"
              "<% } else { %>\nfew\n<% } %>")
    assert render(source) == "many\n"
    assert render(source, events=[]) == "none\n"
    assert render(source, events=EVENTS[:1]) == "few\n"


def test_eta_json_stringify_compact_is_javascripts():
    assert render('<%= JSON.stringify(it.events[1].data) %>') \
        == '{"toolName":"Read","isError":false,"executionTimeMs":45,"cost":1}'


def test_eta_json_stringify_indented_keeps_key_order_and_non_ascii():
    events = [{"type": "x", "data": {"zeta": "é <b>", "alpha": [1, None]}}]
    assert render("<%~ JSON.stringify(it.events[0].data, null, 2) %>", events=events) \
        == '{\n  "zeta": "é <b>",\n  "alpha": [\n    1,\n    null\n  ]\n}'


def test_eta_dash_trims_one_newline_and_underscore_all_whitespace():
    assert render("x\n<%- = 1 -%>\n\ny <%_ = 2 _%>   \n z") == "x1\ny2z"


def test_eta_raw_interpolation_writes_the_same_as_interpolation():
    assert render("<%~ it.codon.description %>|<%= it.codon.description %>") \
        == "Tells the story|Tells the story"


def test_eta_logical_operators_and_ternary_keep_javascript_values():
    source = ("<%= it.codon.missing || 'None' %>|<%= it.events.length > 2 ? 'many' : 'few' %>"
              "|<%= it.events[0] && it.events[0].id %>|<%= !it.events.length %>"
              "|<%= it.codon.missing ?? 'fallback' %>|<%= [] || 'empty arrays are true' %>")
    assert render(source) == "None|many|evt-1|false|fallback|"


def test_eta_callbacks_filter_map_join_some_find():
    source = ("<%= it.events.filter(e => e.type === 'tool.result').length %>;"
              "<%= it.events.map(e => e.type).join(', ') %>;"
              "<%= it.events.some(e => e.type === 'error') %>;"
              "<%= it.events.find(e => e.type === 'error').data.severity.toUpperCase() %>")
    assert render(source) == "1;assistant.action, tool.result, error;true;OPERATION"


def test_eta_callback_reads_outer_names():
    source = ("<% const wanted = 'error'; %><% for (const e of it.events) { %>"
              "<%= it.events.filter(x => x.type === wanted && x.id === e.id).length %><% } %>")
    assert render(source) == "001"


def test_eta_const_declarations_across_statements():
    source = ("<%\n  const tools = it.events.filter(e => e.type === 'tool.result');\n"
              "  const failed = tools.filter(e => e.data.isError);\n%>\n"
              "Tools: <%= tools.length %>, failed: <%= failed.length %>")
    assert render(source) == "Tools: 1, failed: 0"


def test_eta_object_literal_in_a_callback():
    assert render("<%= JSON.stringify(it.events.map(e => ({type: e.type, id: e.id})).slice(0, 1)) %>") \
        == '[{"type":"assistant.action","id":"evt-1"}]'


def test_eta_prints_values_as_javascript_string_conversion():
    events = [{"type": "x", "data": {"ok": True, "none": None, "list": [1, None, "a"],
                                     "obj": {}, "half": 2.5, "whole": 3.0}}]
    source = ("<%= it.events[0].data.ok %> <%= it.events[0].data.none %> "
              "<%= it.events[0].data.missing %> <%= it.events[0].data.list %> "
              "<%= it.events[0].data.obj %> <%= it.events[0].data.half %> "
              "<%= it.events[0].data.whole %>")
    assert render(source, events=events) == "true null undefined 1,,a [object Object] 2.5 3"


def test_eta_arithmetic_and_to_fixed_round_like_javascript():
    source = ("<%= it.events[1].data.executionTimeMs / 10 %> <%= (2.5).toFixed(0) %> "
              "<%= (300000 / 1000).toFixed(1) %> <%= 'n=' + it.events.length %> <%= 1 / 0 %>")
    assert render(source) == "4.5 3 300.0 n=3 Infinity"


def test_eta_string_length_counts_utf16_units():
    assert render("<%= it.events[0].type.length %> <%= '😀'.length %>") == "16 2"


def test_eta_dates_print_and_convert_as_iso():
    assert render("<%= it.world.currentTime.toISOString() %> <%= it.codon.startTime %>") \
        == "2025-01-19T10:00:00.000Z 2025-01-19T09:00:00.000Z"


def test_eta_text_that_looks_like_jinja_stays_literal():
    source = 'A "q" \\ é 😀 {{ x }} {% endraw %} {# c #} }} <%= "ok" %>\n'
    assert render(source) == 'A "q" \\ é 😀 {{ x }} {% endraw %} {# c #} }} ok'


def test_eta_comments_inside_tags_are_ignored():
    assert render("<% /* count */ const n = it.events.length; // note\n %><%= n %>") == "3"


# --- plain Jinja2 ------------------------------------------------------------------------------

def test_jinja_sees_events_codon_world_and_it():
    assert render("{{ events|length }} {{ codon.name }} {{ it.events[0].id }} "
                  "{{ world.currentTime.year }}") == "3 Narrator evt-1 2025"


def test_jinja_for_block_leaves_no_blank_line_and_keeps_trailing_newline():
    assert render("{% for e in events %}\n- {{ e.type }}\n{% endfor %}\n") \
        == "- assistant.action\n- tool.result\n- error\n"


def test_jinja_tojson_matches_json_stringify_without_html_escaping():
    events = [{"type": "x", "data": {"html": "<b>&'", "n": 2.0}}]
    assert render("{{ events[0].data|tojson }}|{{ events[0].data|tojson(2) }}", events=events) \
        == '{"html":"<b>&\'","n":2}|{\n  "html": "<b>&\'",\n  "n": 2\n}'


def test_template_dialect_is_detected_by_eta_tags():
    assert PromptTemplate.compile("<%= it.events.length %>").dialect == "eta"
    assert PromptTemplate.compile("{{ events|length }}").dialect == "jinja"


def test_compiled_templates_are_cached_by_source():
    assert PromptTemplate.compile("{{ codon.id }}") is PromptTemplate.compile("{{ codon.id }}")


# --- sandbox -----------------------------------------------------------------------------------

@pytest.mark.parametrize("source", [
    "{{ ''.__class__.__mro__ }}",
    "{{ events.__class__.__subclasses__() }}",
    "{{ codon.update({'id': 'x'}) }}",
    "{{ events.append(1) }}",
])
def test_jinja_sandbox_blocks_python_internals_and_mutation(source):
    events = [dict(event) for event in EVENTS]
    with pytest.raises(TemplateRenderError, match="SecurityError"):
        render(source, events=events)
    assert events == EVENTS


def test_eta_member_access_never_reaches_python_attributes():
    assert render("<%= it.events.__class__ %> <%= ''.__len__ %>") == "undefined undefined"


@pytest.mark.parametrize(("source", "missing"), [
    ("<% require('child_process').execSync('touch /tmp/pwned') %>", "require"),
    ("<% process.exit(1) %>", "process"),
    ("<%= it.constructor.constructor('return process')().pid %>", "process"),
    ("<%= globalThis.fetch('http://127.0.0.1/') %>", "globalThis.fetch is not a function"),
])
def test_eta_code_reaches_no_file_network_or_process(source, missing, tmp_path):
    """The sandbox is a bare JavaScript realm: the code runs, and finds nothing to act on."""
    with pytest.raises(TemplateRenderError, match=missing):
        render(source)
    assert not (tmp_path / "pwned").exists()


# --- JavaScript the original's configs use (Hankweave's docs and examples) ----------------------

@pytest.mark.parametrize(("source", "expected"), [
    ("<%= Math.round(it.events[1].data.executionTimeMs / 10) %>", "5"),
    ("<%= (it.events[1].data.cost * 1.2345).toFixed(2) %>", "1.23"),
    ("<%= it.events.map(e => e.type).join(', ') %>", "assistant.action, tool.result, error"),
    ("<%= `count: ${it.events.length}` %>", "count: 3"),
    ("<%= it.events.length > 2 ? 'many' : 'few' %>", "many"),
    ("<%= Object.keys(it.codon).join(',') %>", "id,name,description,startTime"),
    ("<%= [...new Set(it.events.map(e => e.data.toolName).filter(Boolean))] %>", "Read"),
    ("<%= it.events.reduce((sum, e) => sum + (e.data.executionTimeMs ?? 0), 0) %>", "45"),
    ("<% for (let i = 0; i < 3; i++) { %><%= i %><% } %>", "012"),
    ("<% let n = 0; it.events.forEach(() => { n += 1 }) %><%= n %>", "3"),
    ("<% const tools = it.events.filter(e => e.type === 'tool.result');"
     " const slow = tools.filter(t => t.data.executionTimeMs > 40); %>"
     "<%= slow.length %>/<%= tools.length %> slow", "1/1 slow"),
    ("<%= JSON.stringify(it.events[1].data, null, 2).split('\\n').length %>", "6"),
    ("<%= it.world.currentTime.getUTCHours() %>", "10"),
])
def test_eta_runs_the_javascript_real_configs_use(source, expected):
    assert render(source) == expected


# --- syntax errors ------------------------------------------------------------------------------

@pytest.mark.parametrize(("source", "reason", "line"), [
    ("Bad syntax: <%= unclosed tag", "unclosed tag", 1),
    ("ok\n<%= 'unclosed %>", "unclosed string", 2),
    ("<% if (it.events.length) { %>\nyes\n", "SyntaxError", None),
    ("a\n\n<%= it.events.map(e => ) %>", "SyntaxError: Unexpected token", 3),
    ("{% for e in events %}no end", "endfor", 1),
])
def test_syntax_errors_say_what_and_where(source, reason, line):
    with pytest.raises(TemplateSyntaxError, match=reason) as caught:
        PromptTemplate.compile(source)
    if line is not None:
        assert caught.value.line == line


# --- the sandbox's limits -------------------------------------------------------------------------

LIMITS_PROBE = """
import sys
from datetime import datetime, UTC
from hankweave.sentinels.templates import TemplateRenderError, render_sentinel_prompt
try:
    render_sentinel_prompt(sys.argv[1], events=[], codon={}, current_time=datetime.now(UTC))
except TemplateRenderError as exc:
    print(exc)
print(render_sentinel_prompt("<%= 1 + 1 %>", events=[], codon={}, current_time=datetime.now(UTC)))
"""


@pytest.mark.parametrize(("source", "said"), [
    ("<% while (true) {} %>", "ran longer than 1000 ms and was stopped"),
    ("<% const a = []; while (true) { a.push(new Array(1e6).fill(7)) } %>",
     "more than 256 MB of memory and was stopped"),
])
def test_an_endless_loop_or_a_huge_allocation_is_stopped_and_the_next_render_works(source, said):
    # In a process of its own, bounded from outside: a limit that failed must not hang the suite.
    done = subprocess.run([sys.executable, "-c", LIMITS_PROBE, source], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert first.startswith("Template rendering failed: ") and said in first
    assert second == "2"


# --- missing values and render errors ----------------------------------------------------------

def test_eta_property_of_undefined_fails_the_render_at_its_line():
    source = ("a\n<% for (const e of it.events) { %>\n<% if (e.type === 'error') { %>\n"
              "<%= e.data.detail.code %>\n<% } %>\n<% } %>")
    with pytest.raises(TemplateRenderError) as caught:
        render(source)
    assert str(caught.value) == ("Template rendering failed: TypeError: Cannot read properties "
                                 "of undefined (reading 'code') at line 4: "
                                 "<%= e.data.detail.code %>")


def test_eta_error_inside_a_callback_reports_the_tags_line():
    with pytest.raises(TemplateRenderError) as caught:
        render("\n\n<%= it.events.filter(e => e.data.nope.x).length %>")
    assert caught.value.line == 3


def test_jinja_missing_name_fails_the_render_naming_it():
    with pytest.raises(TemplateRenderError, match="'nope' is undefined"):
        render("first\n{{ nope }}")
    with pytest.raises(TemplateRenderError, match="no attribute 'detail'") as caught:
        render("{{ events[0].data.detail }}")
    assert caught.value.line == 1


def test_method_on_the_wrong_type_fails_the_render():
    with pytest.raises(TemplateRenderError, match=r"toFixed is not a function"):
        render("<%= it.codon.name.toFixed(2) %>")


# --- the original's context ---------------------------------------------------------------------

def test_context_is_the_originals():
    context = sentinel_prompt_context(events=EVENTS, codon=CODON, current_time=NOW)
    assert context == {"events": EVENTS, "codon": CODON, "world": {"currentTime": NOW}}


def test_context_keeps_the_first_thousand_events():
    events = [{"id": f"evt-{index}", "type": "assistant.action", "data": {"n": index}}
              for index in range(MAX_TEMPLATE_EVENTS + 500)]
    assert render("<%= it.events.length %> <%= it.events[999].id %>", events=events) \
        == "1000 evt-999"


def test_thousand_events_through_loops_and_callbacks():
    events = [{"id": f"evt-{index}", "type": "error" if index % 10 == 0 else "info",
               "data": {"n": index}} for index in range(MAX_TEMPLATE_EVENTS)]
    source = ("<%= it.events.filter(e => e.type === 'error').length %>|"
              "<% for (const e of it.events) { %><% if (e.data.n % 250 === 0) { %>"
              "<%= e.id %>,<% } %><% } %>")
    assert render(source, events=events) == "100|evt-0,evt-250,evt-500,evt-750,"
    assert render("{{ events|selectattr('type', 'equalto', 'error')|list|length }}",
                  events=events) == "100"


# --- JavaScript number printing and laziness -----------------------------------------------------

@pytest.mark.parametrize(("number", "text"), [
    (3.0, "3"), (0.1 + 0.2, "0.30000000000000004"), (1e21, "1e+21"), (1e-7, "1e-7"),
    (0.000001, "0.000001"), (-0.0, "0"), (float("nan"), "NaN"), (float("-inf"), "-Infinity"),
])
def test_numbers_print_as_javascript_does(number, text):
    assert js_number_str(number) == text


def test_importing_the_templates_does_not_import_jinja():
    probe = "import sys, hankweave.sentinels.templates; print('jinja2' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "False"


def test_strict_equality_is_javascript_s() -> None:
    assert render("<%= 1 === true %> <%= 1 == 1.0 %> <%= 'a' !== 'a' %> <%= it.events.length === 0 %>"
                  ) == "false true false false"


def test_what_a_template_leaves_behind_no_other_template_sees():
    """Each template has its own context, and each render its own function scope."""
    assert render("<% globalThis.leak = 1; var local = 2 %><%= typeof leak %>") == "number"
    assert render("<%= typeof leak %> <%= typeof local %>") == "undefined undefined"
    assert render("<% Array.prototype.first = 1 %>x") == "x"
    assert render("<%= [].first %>") == "undefined"
