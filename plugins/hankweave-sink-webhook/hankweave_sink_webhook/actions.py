"""Action links: "approve", "reject", "extend by $1.00" in a message about a pause.

The kernel makes them (docs/webhooks.md): which answers an interruption offers
(:func:`~hankweave.api.link_claims`), each signed with the user's link key
(``~/.config/hankweave/link-key``, made on first use), expiring after ``linkTtlSeconds``, the
token in the URL's fragment (``<dashboardUrl>/act#TOKEN``) so it never reaches a server's log.
The dashboard checks the token and answers once; an interruption is answered once, so every
link of a message stops working when one of them (or anyone) answered it.

A kernel key that cannot be read makes messages go without links (said once in the log); the
rest of the message is unchanged.  Tokens are never logged.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hankweave.api import Interruption, act_url, link_claims, link_key, sign_link
from hankweave_sink_webhook.notes import InterruptionCreatedFields

log = logging.getLogger("hankweave.sink.webhook")


class ActionLinks:
    """Makes the links of one ``interruption.created`` message (a :data:`~hankweave_sink_webhook
    .notes.LinkMaker`)."""

    def __init__(self, dashboard_url: str, ttl_s: float) -> None:
        self.dashboard_url = dashboard_url
        self.ttl_s = ttl_s
        self._key: bytes | None = None
        self._warned = False

    def __call__(self, data: InterruptionCreatedFields, created_at: str,
                 execution: Path) -> list[dict[str, Any]]:
        try:
            if self._key is None:
                self._key = link_key()
            item = Interruption.model_validate({
                "id": data.interruption_id, "runId": data.run_id, "codonId": data.codon_id,
                "kind": data.kind, "question": data.question, "options": data.options,
                "budget": (data.budget.model_dump(by_alias=True, exclude_none=True)
                           if data.budget is not None else None),
                "createdAt": created_at})
            claims = link_claims(item, execution, ttl_s=self.ttl_s)
        except ValidationError as exc:
            self._warn_once(f"no action links: the interruption could not be read"
                            f" ({exc.error_count()} problem(s))")
            return []
        except (OSError, ValueError) as exc:  # the key: LinkError is a ValueError
            # Its message names the key file, never the key.
            self._warn_once(f"no action links: {type(exc).__name__}: {exc}")
            return []
        links = []
        for claim in claims:
            link: dict[str, Any] = {"action": claim.action}
            if claim.amount is not None:
                link["amount"] = claim.amount
            link["label"] = claim.label
            link["url"] = act_url(self.dashboard_url, sign_link(claim, self._key))
            links.append(link)
        return links

    def _warn_once(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning("webhook sink: %s", message)


__all__ = ["ActionLinks"]
