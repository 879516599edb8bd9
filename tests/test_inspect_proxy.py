"""``hankweave inspect proxy``: an execution's LLM proxy record, by codon, and its problems."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from hankweave.cli import cli
from hankweave.execution.layout import ExecutionLayout
from hankweave.proxy.report import proxy_report, read_proxy_log
from hankweave.proxy.types import ProxyRecord


def record(n: int, codon: str | None, **fields: object) -> ProxyRecord:
    base: dict[str, object] = {
        "request_id": f"r-{n}", "at": f"2026-12-06T05:00:0{n}.000Z", "codon_id": codon,
        "upstream": "anthropic", "method": "POST", "path": "/v1/messages", "streamed": True,
        "status": 200, "input_tokens": 1000, "output_tokens": 100, "cost": 0.01,
        "ttfb_ms": 10.0 * n, "duration_ms": 100.0}
    return ProxyRecord.model_validate({**base, **fields})


def execution(tmp_path: Path, records: list[ProxyRecord], tail: str = "") -> Path:
    path = ExecutionLayout(tmp_path).proxy_log
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in records) + tail)
    return tmp_path


RECORDS = [
    record(1, "draft"), record(2, "draft"),
    record(3, "draft", status=400, refused="budget", input_tokens=None, output_tokens=None,
           cost=None, ttfb_ms=0.5),
    record(4, "ship", held_ms=2500.0),
    record(5, None, status=502, error="upstream unreachable", input_tokens=None,
           output_tokens=None, cost=None),
]


def test_the_report_sums_each_codon_and_lists_what_was_refused_or_failed() -> None:
    report = proxy_report(RECORDS)

    assert (report["requests"], report["refused"], report["held"], report["errors"]) == (
        5, 1, 1, 1)
    assert report["cost"] == 0.03
    assert [(c["codonId"], c["requests"], c["refused"], c["inputTokens"])
            for c in report["codons"]] == [("draft", 3, 1, 2000), ("ship", 1, 0, 1000),
                                           (None, 1, 0, 0)]
    # A refusal's instant answer is no measure of the upstream's first byte.
    assert report["codons"][0]["ttfbP50Ms"] == 15.0
    assert [p["requestId"] for p in report["problems"]] == ["r-3", "r-5"]


def test_a_torn_last_line_and_a_line_that_is_no_record_are_skipped(tmp_path: Path) -> None:
    path = execution(tmp_path, RECORDS[:2], tail='garbage\n{"requestId": "r-9", "at')

    read = read_proxy_log(ExecutionLayout(path).proxy_log)

    assert [r.request_id for r in read.records] == ["r-1", "r-2"]
    assert read.skipped == [3]


def test_the_command_shows_the_codons_and_the_problems(tmp_path: Path) -> None:
    path = execution(tmp_path, RECORDS)

    result = CliRunner().invoke(cli, ["inspect", "proxy", "-e", str(path), "--wide"])

    assert result.exit_code == 0, result.output
    assert "5 request(s) through the LLM proxy, $0.0300: 1 refused, 1 held for a person," \
        " 1 failed" in result.output
    assert "(between codons)" in result.output
    assert "refused (budget)" in result.output and "upstream unreachable" in result.output
    as_json = CliRunner().invoke(cli, ["inspect", "proxy", "-e", str(path), "--json"])
    assert json.loads(as_json.output)["requests"] == 5


def test_an_execution_without_the_proxy_says_how_its_next_run_gets_one(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["inspect", "proxy", "-e", str(tmp_path)])

    assert result.exit_code == 2
    assert f"hankweave run -e {tmp_path} --proxy" in result.output
    assert "Traceback" not in result.output
