"""Receipts: a compact JWS (EdDSA over Ed25519, RFC 8037) that OpsGate signs when an outside
request is approved (or allowed), so the host where the command lands can check it without
asking OpsGate. `cryptography` does the Ed25519; the JWS framing is the few lines below.

What a receipt proves: whoever holds the signing key said this tool call, with this digest (and
for `run_command` this argv), was approved by these people under this rule until `exp`. It
does not prove the command runs once (`--once` records `jti` locally for that), nor anything
if the key leaked: keep the key off the hosts that verify.

Checking a receipt where the command lands: the keys (a JWKS URL or file, or a PEM key
file), and `--once`, a local SQLite file of the receipt ids already used.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from bot.errors import PlaneError, ReceiptInvalid

__all__ = [
    "ISSUER",
    "Claims",
    "SigningKey",
    "check_receipt",
    "jwks",
    "load_keys",
    "new_key_pem",
    "public_keys",
    "sign",
    "unverified_claims",
    "use_once",
    "verify",
]

ISSUER = "opsgate"


@dataclass(frozen=True, slots=True)
class Claims:
    """A receipt's claims (`argv` only for `run_command`)."""

    jti: str
    iat: int
    exp: int
    tool: str
    digest: str
    approvers: tuple[str, ...]
    rule: str | None
    channel: str
    argv: tuple[str, ...] | None = None
    iss: str = ISSUER

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "iss": self.iss,
            "jti": self.jti,
            "iat": self.iat,
            "exp": self.exp,
            "tool": self.tool,
            "digest": self.digest,
            "approvers": list(self.approvers),
            "rule": self.rule,
            "channel": self.channel,
        }
        if self.argv is not None:
            out["argv"] = list(self.argv)
        return out

    @classmethod
    def of(cls, data: Mapping[str, Any]) -> Claims:
        try:
            argv = data.get("argv")
            return cls(
                iss=str(data["iss"]),
                jti=str(data["jti"]),
                iat=int(data["iat"]),
                exp=int(data["exp"]),
                tool=str(data["tool"]),
                digest=str(data["digest"]),
                approvers=tuple(str(a) for a in data.get("approvers") or ()),
                rule=None if data.get("rule") is None else str(data["rule"]),
                channel=str(data.get("channel") or ""),
                argv=None if argv is None else tuple(str(a) for a in argv),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ReceiptInvalid(f"malformed claims: {exc}") from None


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError) as exc:
        raise ReceiptInvalid(f"not base64url: {exc}") from None


def _raw(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def key_id(public: Ed25519PublicKey) -> str:
    """A short id for the key: the start of its public key's SHA-256."""
    return _b64(hashlib.sha256(_raw(public)).digest()[:12])


def new_key_pem() -> str:
    """A new Ed25519 private key, PEM (PKCS#8)."""
    return (
        Ed25519PrivateKey.generate()
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        .decode()
    )


class SigningKey:
    """The private key that signs receipts, loaded from PEM."""

    def __init__(self, pem: str | bytes) -> None:
        data = pem.encode() if isinstance(pem, str) else pem
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError) as exc:
            raise ReceiptInvalid(f"the receipt key is not a PEM private key: {exc}") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise ReceiptInvalid("the receipt key is not an Ed25519 key")
        self._key = key
        self.public = key.public_key()
        self.kid = key_id(self.public)

    def signature(self, data: bytes) -> bytes:
        return self._key.sign(data)


def sign(key: SigningKey, claims: Claims) -> str:
    header = {"alg": "EdDSA", "typ": "JWT", "kid": key.kid}
    head = _b64(json.dumps(header, separators=(",", ":")).encode())
    body = _b64(json.dumps(claims.as_json(), separators=(",", ":"), sort_keys=True).encode())
    signature = key.signature(f"{head}.{body}".encode())
    return f"{head}.{body}.{_b64(signature)}"


def jwks(keys: Sequence[Ed25519PublicKey]) -> dict[str, Any]:
    """The keys as a JWK Set (OKP, Ed25519)."""
    return {
        "keys": [
            {"kty": "OKP", "crv": "Ed25519", "x": _b64(_raw(k)), "kid": key_id(k), "alg": "EdDSA"}
            for k in keys
        ]
    }


def public_keys(document: Mapping[str, Any]) -> dict[str, Ed25519PublicKey]:
    """The Ed25519 keys of a JWK Set, by kid."""
    found: dict[str, Ed25519PublicKey] = {}
    for entry in document.get("keys") or ():
        if not isinstance(entry, Mapping) or entry.get("crv") != "Ed25519":
            continue
        public = Ed25519PublicKey.from_public_bytes(_unb64(str(entry.get("x", ""))))
        found[str(entry.get("kid") or key_id(public))] = public
    return found


def _parts(receipt: str) -> tuple[dict[str, Any], dict[str, Any], bytes, bytes]:
    pieces = receipt.strip().split(".")
    if len(pieces) != 3:
        raise ReceiptInvalid("not a compact JWS (three dot-separated parts)")
    try:
        header = json.loads(_unb64(pieces[0]))
        body = json.loads(_unb64(pieces[1]))
    except ValueError as exc:
        raise ReceiptInvalid(f"not JSON: {exc}") from None
    if not isinstance(header, dict) or not isinstance(body, dict):
        raise ReceiptInvalid("header or claims are not JSON objects")
    return header, body, f"{pieces[0]}.{pieces[1]}".encode(), _unb64(pieces[2])


def unverified_claims(receipt: str) -> Claims:
    """The claims without any check (for messages only)."""
    return Claims.of(_parts(receipt)[1])


def verify(
    receipt: str,
    keys: Mapping[str, Ed25519PublicKey],
    *,
    now: float,
    argv: Sequence[str] | None = None,
) -> Claims:
    """The claims of a receipt signed by one of `keys`, unexpired at `now`, and (given `argv`)
    approving exactly that argv; `ReceiptInvalid` naming the first check that failed."""
    header, body, signed, signature = _parts(receipt)
    if header.get("alg") != "EdDSA":
        raise ReceiptInvalid(f"algorithm {header.get('alg')!r} is not EdDSA")
    kid = header.get("kid")
    candidates = [keys[kid]] if isinstance(kid, str) and kid in keys else list(keys.values())
    if not candidates:
        raise ReceiptInvalid("signature: no verification key")
    for public in candidates:
        try:
            public.verify(signature, signed)
            break
        except InvalidSignature:
            continue
    else:
        raise ReceiptInvalid("signature: does not verify with the OpsGate keys")
    claims = Claims.of(body)
    if claims.iss != ISSUER:
        raise ReceiptInvalid(f"issuer {claims.iss!r} is not {ISSUER!r}")
    if now >= claims.exp:
        raise ReceiptInvalid(f"expired: exp {claims.exp} is past (now {int(now)})")
    if argv is not None:
        if claims.argv is None:
            raise ReceiptInvalid(f"argv: the receipt approves {claims.tool!r}, not a command")
        if tuple(argv) != claims.argv:
            raise ReceiptInvalid(f"argv: {list(argv)!r} is not the approved {list(claims.argv)!r}")
    return claims


def load_keys(source: str) -> dict[str, Ed25519PublicKey]:
    """The verification keys at `source`: an http(s) URL serving a JWKS (`/v1/keys`), or a
    file holding a JWKS or a PEM Ed25519 key (public or private)."""
    if source.startswith(("http://", "https://")):
        url = source if source.rstrip("/").endswith("/v1/keys") else source.rstrip("/") + "/v1/keys"
        try:
            response = httpx.get(url, timeout=10)
            response.raise_for_status()
            return public_keys(response.json())
        except (httpx.HTTPError, ValueError) as exc:
            raise PlaneError(f"cannot read the keys at {url}: {exc}") from None
    try:
        data = Path(source).read_bytes()
    except OSError as exc:
        raise PlaneError(f"cannot read the keys file {source}: {exc}") from None
    if data.lstrip().startswith(b"{"):
        return public_keys(json.loads(data))
    return {key_id(public): public for public in [_pem_public(data, source)]}


def _pem_public(data: bytes, source: str) -> Ed25519PublicKey:
    try:
        if b"PRIVATE KEY" in data:
            private = serialization.load_pem_private_key(data, password=None)
            if isinstance(private, Ed25519PrivateKey):
                return private.public_key()
        else:
            public = serialization.load_pem_public_key(data)
            if isinstance(public, Ed25519PublicKey):
                return public
    except ValueError as exc:
        raise PlaneError(f"{source}: not a PEM key: {exc}") from None
    raise PlaneError(f"{source}: not an Ed25519 key")


def use_once(db_file: Path, claims: Claims) -> None:
    """Record the receipt's id; `ReceiptInvalid` if it was used before (on this host)."""
    with sqlite3.connect(db_file, timeout=30) as conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS used_receipts (jti TEXT PRIMARY KEY, used_at REAL NOT NULL)"
        )
        try:
            conn.execute("INSERT INTO used_receipts VALUES (?, ?)", (claims.jti, time.time()))
        except sqlite3.IntegrityError:
            raise ReceiptInvalid(f"replayed: receipt {claims.jti} was used already") from None


def check_receipt(
    receipt: str,
    keys_source: str,
    *,
    argv: Sequence[str] | None = None,
    once: Path | None = None,
) -> Claims:
    """Every check `opsgate receipt verify` makes, the `--once` record last."""
    claims = verify(receipt, load_keys(keys_source), now=time.time(), argv=argv)
    if once is not None:
        use_once(once, claims)
    return claims
