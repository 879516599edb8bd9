"""Reasoning variants on the Claude harness: the effort of ``sonnet-xhigh`` reaches the model
request the real Claude Code CLI makes to the mock provider (issue 36)."""

from __future__ import annotations

from claude_helpers import HankProject, codon

from hankweave.api import ReasoningEffort, get_registry

HELLO = {"rules": [{"name": "hello", "reply": {"text": "Hello!"}}]}


def test_a_variants_effort_is_the_clis_request_effort(project: HankProject) -> None:
    sonnet = get_registry().resolve_model("sonnet")
    # The CLI sends an effort to models with adaptive thinking (the newest Claude models), as
    # litellm's data says of the alias's model.
    assert ReasoningEffort.XHIGH in sonnet.reasoning_efforts
    project.write([codon("deep", model="sonnet-xhigh", promptText="Say hello deeply."),
                   codon("plain", model="sonnet", promptText="Say hello plainly.")], HELLO)

    result = project.run()

    assert result.code == 0, result.stderr
    efforts = {}
    for request in project.model_requests():
        body = request["request"]
        prompt = "deep" if "deeply" in str(body["messages"]) else "plain"
        assert body["model"] == sonnet.model_id
        efforts[prompt] = (body.get("output_config") or {}).get("effort")
    assert efforts["deep"] == "xhigh"
    assert efforts["plain"] != "xhigh"
