"""Signed webhook and Slack notifications of hankweave runs: the ``webhook`` event sink
(README.md, docs/webhooks.md), and :func:`verify_signature` for the receiving side."""

from hankweave_sink_webhook.signing import verify_signature

__all__ = ["verify_signature"]
