"""Signed action links (hankweave.links, docs/webhooks.md): a token verifies only under the key
that signed it, until it expires, and says exactly one answer."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from hankweave.links import (
    ActionClaim,
    LinkError,
    act_url,
    link_claims,
    link_key,
    sign_link,
    verify_link,
)
from hankweave.state.types import Interruption

NOW = 1_796_500_000.0


def claim(**fields: object) -> ActionClaim:
    data: dict[str, object] = {"execution": "/runs/exec", "interruption": "int-1-abcde",
                               "action": "approve", "expires": int(NOW) + 60, **fields}
    return ActionClaim.model_validate(data)


def budget_ask() -> Interruption:
    return Interruption.model_validate({
        "id": "int-1-abcde", "runId": "r1", "codonId": "draft", "kind": "budget",
        "question": "codon draft reached its $2.00 ceiling; spent $2.03; extend by?",
        "createdAt": "2026-12-06T00:00:00.000Z",
        "budget": {"scope": "codon", "currency": "cost", "limit": 2.0, "used": 2.03,
                   "source": "codon cap"}})


def test_a_token_verifies_under_its_key_and_says_its_claim():
    key = os.urandom(32)
    token = sign_link(claim(action="extend", amount=1.5), key)

    verified = verify_link(token, key, now=NOW)

    assert (verified.action, verified.amount, verified.interruption) == (
        "extend", 1.5, "int-1-abcde")
    assert verified.given().extend == "1.5"


def test_a_token_signed_with_another_key_or_changed_is_refused():
    key = os.urandom(32)
    token = sign_link(claim(), key)
    body, _, signature = token.partition(".")
    forged_body = sign_link(claim(action="reject"), os.urandom(32)).partition(".")[0]

    for forged in (sign_link(claim(), os.urandom(32)),  # another key
                   f"{forged_body}.{signature}",  # another claim under this signature
                   f"{body}.{signature[:-2]}{'A' if signature[-2] != 'A' else 'B'}{signature[-1]}"):
        with pytest.raises(LinkError, match="does not verify"):
            verify_link(forged, key, now=NOW)


def test_an_expired_token_is_refused_after_its_signature_is_checked():
    key = os.urandom(32)
    token = sign_link(claim(expires=int(NOW) - 1), key)

    with pytest.raises(LinkError, match="expired"):
        verify_link(token, key, now=NOW)
    with pytest.raises(LinkError, match="does not verify"):  # no expiry news for a forgery
        verify_link(token, os.urandom(32), now=NOW)


@pytest.mark.parametrize("token", ["", "abc", ".", "abc.", ".abc", "a.b.c", "é.é", "é.abcd"])
def test_a_malformed_token_is_refused(token):
    with pytest.raises(LinkError):
        verify_link(token, os.urandom(32), now=NOW)


def test_the_token_travels_in_the_fragment():
    assert act_url("http://127.0.0.1:8765/", "T0K.EN") == "http://127.0.0.1:8765/act#T0K.EN"


def test_a_budget_ask_offers_two_extensions_and_a_rejection():
    offered = link_claims(budget_ask(), Path("/runs/exec"), now=NOW, ttl_s=60)

    assert [(c.action, c.amount) for c in offered] == [("extend", 1.0), ("extend", 2.0),
                                                       ("reject", None)]
    assert [c.label for c in offered] == ["extend by $1.00", "extend by $2.00", "reject"]
    assert {c.expires for c in offered} == {int(NOW) + 60}
    assert len({c.nonce for c in offered}) == 3


def test_the_key_is_made_once_private_and_shared_by_concurrent_makers(tmp_path):
    path = tmp_path / "config" / "hankweave" / "link-key"
    keys: list[bytes] = []
    threads = [threading.Thread(target=lambda: keys.append(link_key(path))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(set(keys)) == 1 and len(keys[0]) == 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert link_key(path) == keys[0]
    assert not [p for p in path.parent.iterdir() if p.name != "link-key"]


def test_a_damaged_key_file_is_an_error_not_a_new_key(tmp_path):
    path = tmp_path / "link-key"
    path.write_text("not hex\n")
    path.chmod(0o600)

    with pytest.raises(LinkError, match="not a link key"):
        link_key(path)


def test_a_key_others_can_read_or_a_symlinked_key_is_refused(tmp_path):
    made = tmp_path / "made"
    link_key(made)
    readable = tmp_path / "readable"
    readable.write_text(made.read_text())
    readable.chmod(0o644)
    symlinked = tmp_path / "symlinked"
    symlinked.symlink_to(made)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    odd = tmp_path / "odd"
    odd.write_bytes("é".encode() * 32)
    odd.chmod(0o600)

    with pytest.raises(LinkError, match="readable only by you"):
        link_key(readable)
    for refused in (symlinked, dangling):
        with pytest.raises(LinkError, match="symlink is refused"):
            link_key(refused)
    assert not (tmp_path / "nowhere").exists()  # never written through a dangling link
    with pytest.raises(LinkError, match="not a link key") as raised:
        link_key(odd)
    assert raised.value.reason == "key"


def test_a_signature_has_one_spelling():
    key = os.urandom(32)
    token = sign_link(claim(), key)
    body, _, signature = token.partition(".")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    # The last character carries 2 bits of the digest and 4 unused ones.
    spellings = [f"{body}.{signature[:-1]}{c}" for c in alphabet]
    accepted = []
    for spelling in spellings:
        try:
            verify_link(spelling, key, now=NOW)
        except LinkError:
            continue
        accepted.append(spelling)
    assert accepted == [token]
