"""Acting from a message: a signed link answers one interruption (issue 42).

A webhook message about a pause carries links ``DASHBOARD/act#TOKEN`` (the token's format and
signature: the kernel's ``hankweave.api.verify_link`` and its neighbours).  The page at
``/act`` reads the token from the URL's fragment, which a browser never sends, so it reaches no access log; it asks :func:`preview`
what the link will do and calls :func:`act` when the person confirms.  Nothing acts on a GET:
chat apps fetch a link to preview it.

The link is the credential of these two endpoints (they need no control key).  Each request is
checked in this order, and nothing of the claim is trusted before its signature is:

1. the token: its shape (:class:`~hankweave_dashboard.catalog.BadRequest`, 400), its
   signature (:class:`LinkForged`, 403), its expiry (:class:`LinkExpired`, 410);
2. the execution is one this dashboard serves, the interruption is one of its own (404);
3. the interruption still waits (409).  An interruption is answered once, so a link used
   again, or another link of the same message, is refused here (or by the kernel, which checks
   again under the execution's lock, when two arrive at once).

The token is never logged and never sent back: responses name the execution, the interruption
and the action, not the link.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from hankweave.api import (
    LINK_ANSWERED_BY,
    ActionClaim,
    HankweaveState,
    LinkError,
    ceiling_name,
    describe_amount,
    document_of,
    link_key,
    verify_link,
)
from hankweave_dashboard.actions import ActionRefused, give
from hankweave_dashboard.catalog import BadRequest, Catalog, NotFound, identity
from hankweave_dashboard.pages import load
from hankweave_dashboard.resume import Resumer

MAX_TOKEN = 4096
"""Characters of a token: a claim is a few hundred; anything longer is not one of ours."""
_SIGNED_SHAPE = re.compile(r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$")
"""``body.signature``, both base64url, the signature an HMAC-SHA256 (32 bytes, 43 characters)."""


class LinkBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    token: str = Field(max_length=MAX_TOKEN)
    """The link's fragment, as the page read it."""


class LinkForged(Exception):
    """The signature does not verify: the link was changed, or signed with another key (403)."""


class LinkExpired(Exception):
    """A genuine link past its expiry (410)."""


class LinkKeyError(Exception):
    """The user's link key cannot be read: the dashboard's problem, not the link's (500)."""


def verified(token: str) -> ActionClaim:
    """The claim of ``token`` under the user's link key, or the refusal that says why."""
    token = token.strip()
    if not token:
        raise BadRequest("this link has no token: open the whole link from the message")
    if not _SIGNED_SHAPE.match(token):  # cut short, or not a link's token at all
        raise BadRequest("this link is incomplete: copy the whole link from the message")
    try:
        key = link_key()
    except (LinkError, OSError) as exc:
        raise LinkKeyError(f"the dashboard cannot read its link key: {exc}") from None
    try:
        return verify_link(token, key)
    except LinkError as exc:
        if exc.reason == "expired":
            raise LinkExpired(str(exc)) from None
        if exc.reason == "malformed":
            raise BadRequest(str(exc)) from None
        raise LinkForged(str(exc)) from None


# ----- what the link acts on -----


def target(catalog: Catalog, claim: ActionClaim) -> tuple[str, Path, HankweaveState]:
    """The execution the claim names, if this dashboard serves it: its id, directory and
    state; the interruption must be one of its own, still waiting."""
    named = Path(claim.execution)
    ident = catalog.served_id(named) if named.is_absolute() else None
    if ident is None:
        raise NotFound(f"the link is for {named}, which this dashboard does not serve (it"
                       f" serves the executions under {', '.join(map(str, catalog.roots))})")
    path = catalog.path_of(ident)
    state = load(path)
    item = state.interruption(claim.interruption)
    if item is None:
        raise NotFound(f"no interruption {claim.interruption} in {path}")
    if item.status != "pending":
        raise ActionRefused(f"interruption {item.id} was already answered ({_answer(item.answer)}"
                            f" by {item.answered_by or 'someone'} at {item.answered_at}): a"
                            " link acts once")
    if claim.action not in _ACTIONS.get(item.kind, ()):
        raise BadRequest(f"this link would {claim.action} interruption {item.id}, which is"
                         f" {_KINDS.get(item.kind, item.kind)}: answer it on the execution's"
                         " page")
    return ident, path, state


_ACTIONS: dict[str, frozenset[str]] = {
    "approval": frozenset({"approve", "reject"}),
    "tool-approval": frozenset({"approve", "reject"}),
    "budget": frozenset({"extend", "reject"}),
    "question": frozenset(),
}
_KINDS = {"approval": "an approval", "tool-approval": "a tool call's approval",
          "budget": "a budget ceiling", "question": "a question (it needs words)"}


def preview(catalog: Catalog, claim: ActionClaim) -> dict[str, Any]:
    """What the link will do, for the page to show before the person confirms."""
    ident, path, state = target(catalog, claim)
    item = state.interruption(claim.interruption)
    assert item is not None
    document = document_of(path, state).execution
    codon = next((entry.codon.name for entry in state.execution_plan
                  if entry.codon_id == item.codon_id), None)
    return {
        "execution": {"id": ident, "name": path.name, "path": str(path),
                      **identity(path, document.hank_path)},
        "interruption": {
            "id": item.id, "kind": item.kind, "codonId": item.codon_id, "codonName": codon,
            # The whole call a tool approval holds: its question shows only the start of it.
            "question": item.question, "toolName": item.tool_name,
            "toolInput": item.tool_input, "gate": item.gate,
            "budget": (item.budget.model_dump(mode="json", by_alias=True, exclude_none=True)
                       if item.budget is not None else None),
            "createdAt": item.created_at, "deadline": item.deadline},
        "action": claim.action,
        "amount": claim.amount,
        "summary": summary(item, claim),
        "expires": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(claim.expires)),
    }


async def act(catalog: Catalog, claim: ActionClaim, resumer: Resumer) -> dict[str, Any]:
    """Answer the claim's interruption (``answeredBy`` ``webhook-link``); then the run goes
    on if a runtime waits for it, else its resume is queued on an executor's workers, or the
    command that resumes it is given."""
    from starlette.concurrency import run_in_threadpool

    _, path, state = await run_in_threadpool(target, catalog, claim)
    item = state.interruption(claim.interruption)
    assert item is not None
    recorded = await give(path, item.id, claim.given(), LINK_ANSWERED_BY)
    done = f"{summary(item, claim)}: done."
    if recorded.forwarded:
        return {"ok": True, "answer": recorded.answer, "forwarded": True, "resume": None,
                "message": f"{done} The run was waiting for it: the run goes on."}
    resume = await run_in_threadpool(resumer.resume, path)
    return {"ok": True, "answer": recorded.answer, "forwarded": False,
            "resume": resume.to_json(), "message": f"{done} {resume.message}"}


# ----- words -----


def summary(item: Any, claim: ActionClaim) -> str:
    """The link's action in a sentence (``Extend the $2.00 ceiling of codon draft by
    $1.00``); ``item`` is the interruption it answers."""
    if item.kind == "budget":
        ceiling = _ceiling(item)
        if claim.action == "extend":
            currency = item.budget.currency if item.budget is not None else "cost"
            return f"Extend {ceiling} by {describe_amount(currency, claim.amount or 0.0)}"
        return f"Refuse to raise {ceiling}"
    verb = "Approve" if claim.action == "approve" else "Reject"
    if item.kind == "tool-approval":
        return f"{verb} the {item.tool_name or 'tool'} call of codon {item.codon_id}"
    if item.gate == "after":
        return f"{verb} the result of codon {item.codon_id}"
    if item.gate == "before":
        return f"{verb} starting codon {item.codon_id}"
    return f"{verb} codon {item.codon_id}"


def _ceiling(item: Any) -> str:
    ask = item.budget
    if ask is None:
        return f"the budget ceiling of codon {item.codon_id}"
    owner = {"codon": f"codon {item.codon_id}",
             "loop": f"loop {ask.loop_id} (at codon {item.codon_id})",
             "run": f"the run (at codon {item.codon_id})"}[ask.scope]
    return f"the {ceiling_name(ask.currency, ask.limit)} of {owner}"


def _answer(value: Any) -> str:
    if isinstance(value, dict) and set(value) == {"extend"}:
        return f"extend by {value['extend']}"
    return str(value)
