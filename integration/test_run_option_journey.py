"""A run option end to end (``--max-cost-per-codon``, declared once in
``hankweave.config.run_options``): given on the command line it stops each codon at its
ceiling; a pasted ``run -e DIR`` keeps it; given again, it replaces the recorded one."""

from __future__ import annotations

import json

from integration.conftest import codon

ONE_MESSAGE = 0.00011
"""What one scripted message of the fake model costs (10 input, 20 output tokens)."""


def limits_of(project, codon_id: str) -> list[dict]:
    return [event["data"]["limits"] for event in project.events()
            if event["type"] == "budget.limits" and event["data"]["codonId"] == codon_id]


def test_max_cost_per_codon_stops_each_codon_and_a_resume_keeps_it_until_given_again(project):
    project.write_hank([codon("a"), codon("b")], overrides={"budget": {"onExceeded": "fail"}})
    project.write_script({"a": {"messages": 5}, "b": {"messages": 1}})

    first = project.run("--max-cost-per-codon", "0.0002")

    assert first.returncode == 1, first.stderr
    (a,) = project.state().runs[0].codons
    assert a.status == "failed" and a.assistant_message_count == 2
    assert a.failure_reason.message.startswith("Budget exceeded")
    intent = json.loads((project.exec_dir / ".hankweave" / "run-intent.json").read_text())
    assert intent["maxCostPerCodon"] == 0.0002
    (limits,) = limits_of(project, "a")
    assert (limits["maxDollars"], limits["dollarsSource"]) == (0.0002, "--max-cost-per-codon")

    pasted = project.run()  # the printed `hankweave run -e DIR`, nothing else

    assert pasted.returncode == 1, pasted.stderr
    assert "dollar ceiling per codon $0.0002" in pasted.stderr
    assert project.state().runs[0].codons[-1].assistant_message_count == 2

    raised = project.run("--max-cost-per-codon", "1")

    assert raised.returncode == 0, raised.stderr
    assert "dollar ceiling per codon (--max-cost-per-codon): $0.0002 -> $1" in raised.stderr
    run = project.state().runs[0]
    assert [(record.codon_id, record.status) for record in run.codons][-2:] == [
        ("a", "completed"), ("b", "completed")]
    assert run.codons[-2].assistant_message_count == 5


def test_a_codon_s_own_lower_cap_wins_over_max_cost_per_codon(project):
    project.write_hank([codon("a", budget={"maxDollars": 0.0002})])
    project.write_script({"a": {"messages": 5}})

    done = project.run("--max-cost-per-codon", "1")

    assert done.returncode == 0, done.stderr
    (a,) = project.state().runs[0].codons
    assert a.assistant_message_count == 2 and a.budget_exceeded.limit == 0.0002
    assert [limits["dollarsSource"] for limits in limits_of(project, "a")] == ["codon cap"]


def test_max_cost_per_codon_refuses_zero_before_anything_runs(project):
    project.write_hank([codon("a")])

    refused = project.run("--max-cost-per-codon", "0")

    assert refused.returncode == 2
    assert "--max-cost-per-codon" in refused.stderr and "Traceback" not in refused.stderr
    assert not project.exec_dir.exists()
