"""What rendering a sentinel's Eta template in the JavaScript sandbox costs, against the same
prompt written in Jinja2 (the other dialect), measured in one process, alternating.

* ``first_render_ms``: the first Eta render of the process: V8's context (made once) and the
  template's compile;
* ``eta_render_us`` / ``jinja_render_us``: the median of ``--rounds`` alternating rounds (A B,
  B A, ...) of ``--renders`` renders each, warm, of an equivalent prompt over ``--events``
  events (a loop over the events, a filter, a count, a JSON dump of one payload);
* ``ratio``: eta / jinja.

Prints one JSON line.  Target: a warm Eta render under 2 ms with 100 events (``target_ms``,
``ok``): sentinels render once per trigger, next to an LLM call of seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import UTC, datetime

from hankweave.sentinels.templates import PromptTemplate, sentinel_prompt_context

ETA = """Codon <%= it.codon.id %>: <%= it.events.length %> events
<% for (const e of it.events.filter(e => e.type === 'tool.result')) { %>
- <%= e.data.toolName %> in <%= (e.data.executionTimeMs / 1000).toFixed(2) %> s
<% } %>
Errors: <%= it.events.filter(e => e.data.isError).length %>
<%= JSON.stringify(it.events[0].data) %>
"""
JINJA = """Codon {{ codon.id }}: {{ events | length }} events
{% for e in events if e.type == 'tool.result' %}
- {{ e.data.toolName }} in {{ '%.2f' | format(e.data.executionTimeMs / 1000) }} s
{% endfor %}
Errors: {{ events | selectattr('data.isError') | list | length }}
{{ events[0].data | tojson }}
"""
TARGET_MS = 2.0


def events(count: int) -> list[dict]:
    return [{"type": "tool.result" if n % 2 else "assistant.action",
             "data": {"toolName": "Read", "executionTimeMs": 40 + n, "isError": n % 7 == 0}}
            for n in range(count)]


def per_render_us(template: PromptTemplate, context: dict, renders: int) -> float:
    start = time.perf_counter()
    for _ in range(renders):
        template.render(context)
    return (time.perf_counter() - start) / renders * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--renders", type=int, default=50)
    args = parser.parse_args()
    context = sentinel_prompt_context(events=events(args.events), codon={"id": "c"},
                                      current_time=datetime.now(UTC))
    start = time.perf_counter()
    eta = PromptTemplate(ETA)
    eta.render(context)
    first_ms = (time.perf_counter() - start) * 1000
    jinja = PromptTemplate(JINJA)
    jinja.render(context)
    rounds = []
    for number in range(args.rounds):
        pair = (eta, jinja) if number % 2 == 0 else (jinja, eta)
        timed = {id(t): per_render_us(t, context, args.renders) for t in pair}
        rounds.append((timed[id(eta)], timed[id(jinja)]))
    eta_us = statistics.median(r[0] for r in rounds)
    jinja_us = statistics.median(r[1] for r in rounds)
    print(json.dumps({"benchmark": "eta_templates", "events": args.events,
                      "first_render_ms": round(first_ms, 1), "eta_render_us": round(eta_us, 1),
                      "jinja_render_us": round(jinja_us, 1), "ratio": round(eta_us / jinja_us, 2),
                      "target_ms": TARGET_MS, "ok": eta_us / 1000 <= TARGET_MS}))


if __name__ == "__main__":
    main()
