"""Receipts (compact JWS, EdDSA): what verifies and what each refusal names."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from bot.errors import ReceiptInvalid
from bot.plane.receipts import (
    Claims,
    SigningKey,
    check_receipt,
    jwks,
    load_keys,
    new_key_pem,
    public_keys,
    sign,
    verify,
)

NOW = 1_800_000_000


def _claims(**changes: object) -> Claims:
    base = Claims(
        jti="r1",
        iat=NOW,
        exp=NOW + 900,
        tool="run_command",
        digest="abcdef123456",
        approvers=("U0BOB",),
        rule="tools.run_command.rules[1]",
        channel="C0OPS",
        argv=("deploy", "prod"),
    )
    return Claims(**{**base.as_json(), **changes, "approvers": base.approvers, "argv": base.argv})


@pytest.fixture
def key() -> SigningKey:
    return SigningKey(new_key_pem())


def test_a_signed_receipt_verifies_and_carries_its_claims(key: SigningKey) -> None:
    receipt = sign(key, _claims())
    header = json.loads(base64.urlsafe_b64decode(receipt.split(".")[0] + "=="))
    assert header == {"alg": "EdDSA", "typ": "JWT", "kid": key.kid}
    claims = verify(receipt, public_keys(jwks([key.public])), now=NOW + 1, argv=["deploy", "prod"])
    assert claims == _claims()
    assert claims.as_json()["iss"] == "opsgate"


def test_expired_other_argv_and_other_key_are_refused(key: SigningKey) -> None:
    receipt = sign(key, _claims())
    keys = public_keys(jwks([key.public]))
    with pytest.raises(ReceiptInvalid, match=r"^expired"):
        verify(receipt, keys, now=NOW + 900)
    with pytest.raises(ReceiptInvalid, match=r"^argv"):
        verify(receipt, keys, now=NOW, argv=["deploy", "prod", "--force"])
    other = SigningKey(new_key_pem())
    with pytest.raises(ReceiptInvalid, match=r"^signature"):
        verify(receipt, public_keys(jwks([other.public])), now=NOW)


def test_a_changed_claim_or_algorithm_breaks_the_signature(key: SigningKey) -> None:
    head, body, signature = sign(key, _claims()).split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=="))
    claims["argv"] = ["rm", "-rf", "/"]
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    keys = public_keys(jwks([key.public]))
    with pytest.raises(ReceiptInvalid, match=r"^signature"):
        verify(f"{head}.{forged}.{signature}", keys, now=NOW, argv=["rm", "-rf", "/"])
    none = base64.urlsafe_b64encode(b'{"alg":"none"}').rstrip(b"=").decode()
    with pytest.raises(ReceiptInvalid, match="algorithm 'none'"):
        verify(f"{none}.{body}.", keys, now=NOW)
    with pytest.raises(ReceiptInvalid, match="three"):
        verify("not-a-receipt", keys, now=NOW)


def test_a_receipt_for_another_tool_approves_no_command(key: SigningKey) -> None:
    receipt = sign(key, Claims("r2", NOW, NOW + 60, "http_request", "d", (), None, "C0OPS"))
    with pytest.raises(ReceiptInvalid, match="not a command"):
        verify(receipt, public_keys(jwks([key.public])), now=NOW, argv=["ls"])


def test_keys_load_from_a_jwks_or_pem_file_and_once_refuses_a_replay(
    key: SigningKey, tmp_path: Path
) -> None:
    (tmp_path / "keys.json").write_text(json.dumps(jwks([key.public])))
    pem = tmp_path / "key.pem"
    pem.write_text(new_key_pem())
    own = SigningKey(pem.read_text())
    assert list(load_keys(str(tmp_path / "keys.json"))) == [key.kid]
    assert list(load_keys(str(pem))) == [own.kid]
    receipt = sign(own, _claims(exp=2**40))
    once = tmp_path / "used.db"
    assert check_receipt(receipt, str(pem), once=once).jti == "r1"
    with pytest.raises(ReceiptInvalid, match=r"^replayed"):
        check_receipt(receipt, str(pem), once=once)
