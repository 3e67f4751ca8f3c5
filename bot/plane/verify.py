"""Checking a receipt where the command lands: the keys (a JWKS URL or file, or a PEM key
file), and `--once`, a local SQLite file of the receipt ids already used."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from bot.errors import PlaneError, ReceiptInvalid

from .receipts import Claims, key_id, public_keys, verify

__all__ = ["check_receipt", "load_keys", "use_once"]


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
