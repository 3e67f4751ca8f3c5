"""The audit chain: each audit row's `hash` covers the row and the previous row's hash, so an
edit, a deletion, a reordering or (against a head kept elsewhere) a truncation shows.

Pinned (outside checks recompute it): `hash` = hex SHA-256, or hex HMAC-SHA-256 with
`OPSGATE_AUDIT_KEY` when that is set, of the row's canonical JSON (the row as
`opsgate audit --json` prints it, without `hash`: keys sorted, no spaces, UTF-8) followed by
`prev_hash`; the first row's `prev_hash` is 64 zeros. The row printed and the row hashed are
the same dict (`printed`), so the two cannot drift apart.

The chain head records whether the chain is keyed, by the key's fingerprint (`key_mark`, never
the key), so a keyed log rewritten with plain SHA-256 cannot pass for an unkeyed one, and
a row the store cannot read (edited by hand) is an `Unreadable` entry, named by its seq, rather
than an error that stops the walk.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from pydantic import TypeAdapter

from .db import Tx
from .models import AuditRow

__all__ = [
    "GENESIS",
    "KEY_VARIABLE",
    "UNKEYED",
    "AuditEntry",
    "Broken",
    "ChainHead",
    "Intact",
    "KeyMismatch",
    "RecordedHead",
    "Unreadable",
    "Verdict",
    "audit_key",
    "canonical_hash",
    "chain_existing_rows",
    "chain_links",
    "key_mark",
    "key_mismatch",
    "last_row_mark",
    "printed",
    "printed_time",
    "record_key_fingerprint",
    "row_hash",
    "verify_chain",
]

GENESIS = "0" * 64
"""The `prev_hash` of the first row."""

KEY_VARIABLE = "OPSGATE_AUDIT_KEY"


def audit_key() -> bytes | None:
    """The HMAC key from the environment, read where it is used: the writer, the migration and
    `opsgate audit verify` must all see the same one, and none of them keeps it elsewhere."""
    key = os.environ.get(KEY_VARIABLE, "")
    return key.encode() if key else None


_FINGERPRINT_LABEL = b"opsgate audit key fingerprint"
UNKEYED = "sha256"
"""What the head records of a chain hashed with plain SHA-256."""


@functools.lru_cache(maxsize=4)
def key_mark(key: bytes | None) -> str:
    """How the chain head records the hashing (`audit_chain.key_fingerprint`): "sha256", or
    "hmac-sha256:" and the key's fingerprint, the first 16 hex digits of the SHA-256 of an
    HMAC of a fixed label under the key: it names the key without giving it away."""
    if key is None:
        return UNKEYED
    mac = hmac.new(key, _FINGERPRINT_LABEL, hashlib.sha256).digest()
    return "hmac-sha256:" + hashlib.sha256(mac).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Unreadable:
    """An audit row the store cannot read back as one (bad JSON, a NULL, a value of the wrong
    type: edited by hand); `seq` is None when that column is what cannot be read."""

    id: int | None
    seq: int | None
    why: str


AuditEntry = AuditRow | Unreadable
"""An audit row as the lenient readers (`opsgate audit`, verify, the export) list it."""


def printed(row: AuditEntry) -> dict[str, Any]:
    """The row as `opsgate audit --json` prints it (an unreadable one: its id, seq and why)."""
    if isinstance(row, Unreadable):
        return {"id": row.id, "seq": row.seq, "unreadable": row.why}
    return row.model_dump(mode="json")


_TIME = TypeAdapter(datetime)


def printed_time(at: datetime) -> str:
    """`at` as `printed` gives it (pydantic's JSON form), for an append that hashes its row
    from the values in hand instead of building the model and dumping it."""
    return str(_TIME.dump_python(at, mode="json"))


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode
"""`json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`, the pinned
form, with its encoder built once instead of on every call (a third of the dump's time)."""


def canonical_hash(data: dict[str, Any], key: bytes | None) -> str:
    """The pinned hash of a printed row given without its `hash` (it holds `prev_hash`)."""
    digest = hashlib.sha256() if key is None else hmac.new(key, digestmod=hashlib.sha256)
    digest.update(_CANONICAL(data).encode())
    digest.update(str(data["prev_hash"]).encode())
    return digest.hexdigest()


def row_hash(row: AuditRow, key: bytes | None) -> str:
    """The row's hash as pinned (its own `hash` field is left out)."""
    data = printed(row)
    data.pop("hash", None)
    return canonical_hash(data, key)


@dataclass(frozen=True, slots=True)
class ChainHead:
    """The chain's last link as a store last saw it: where the next append goes."""

    seq: int
    hash: str
    last_id: int


def chain_links(
    head: ChainHead, rows: Sequence[dict[str, Any]], key: bytes | None
) -> list[dict[str, Any]]:
    """`rows` (printed, without id, seq and hashes) as the links that follow `head`, in order:
    each hashed over the one before it, so a batch is appended as one append would write
    each of its rows (`ChainHead` of the last: `chain_links(...)[-1]`)."""
    links, prev = [], head.hash
    for n, fields in enumerate(rows, start=1):
        link = fields | {"id": head.last_id + n, "seq": head.seq + n, "prev_hash": prev}
        link["hash"] = prev = canonical_hash(link, key)
        links.append(link)
    return links


@dataclass(frozen=True, slots=True)
class RecordedHead:
    """The chain head as the database records it: the last link, and how the chain is hashed
    (`keyed`: a `key_mark`; None while not recorded: between the upgrade that added it,
    run without the key, and the first append, which records its writer's once that
    writer's key verifies the last row)."""

    seq: int
    hash: str
    keyed: str | None


@dataclass(frozen=True, slots=True)
class Intact:
    kind: Literal["intact"]
    rows: int
    head: str
    """The last row's hash (GENESIS for an empty log)."""


@dataclass(frozen=True, slots=True)
class Broken:
    kind: Literal["broken"]
    seq: int
    """The first row that fails (or the first missing one)."""
    why: str


@dataclass(frozen=True, slots=True)
class KeyMismatch:
    """The key in hand is not the one the chain head records (or one is missing)."""

    kind: Literal["key"]
    why: str


Verdict = Intact | Broken | KeyMismatch


def key_mismatch(keyed: str | None, key: bytes | None) -> KeyMismatch | None:
    """Why `key` cannot verify (or write) a chain whose head records `keyed` (a `key_mark`);
    None if it can, or if the head records nothing yet."""
    mine = key_mark(key)
    if keyed is None or mine == keyed:
        return None
    if key is None:
        why = f"the chain is keyed ({keyed}): set {KEY_VARIABLE} to its key to verify it"
    elif keyed == UNKEYED:
        why = (
            f"the chain head says it is not keyed (plain SHA-256) but {KEY_VARIABLE} is set "
            f"({mine}): a keyed chain rewritten without its key, or the wrong database"
        )
    else:
        why = f"{KEY_VARIABLE}'s fingerprint ({mine}) differs from the chain's ({keyed})"
    return KeyMismatch("key", why)


def verify_chain(
    rows: Sequence[AuditEntry],
    *,
    key: bytes | None,
    keyed: str | None = None,
    head: str | None = None,
    chain_seq: int | None = None,
) -> Verdict:
    """Walk `rows` (in the order the log lists them); the first failure wins. `keyed`: the
    `key_mark` the chain head records (checked first, unless the log is empty: a key that is
    missing or another one fails before any row); `head`: a hash printed earlier that must
    still be in the chain; `chain_seq`: the seq the database's chain head records (rows cut
    off the end show against it, unless it was rewritten too)."""
    empty = not rows and not chain_seq  # no row yet: the first writer's key will be the chain's
    if not empty and (mismatch := key_mismatch(keyed, key)) is not None:
        return mismatch
    prev, expected = GENESIS, 1
    seqs = {row.seq for row in rows}
    for row in rows:
        if row.seq is None:
            why = f"the row with id {row.id} after seq {expected - 1}: {_why(row)}"
            return Broken("broken", expected, f"unreadable: {why}")
        if row.seq != expected:
            if row.seq < expected or expected in seqs:
                return Broken(
                    "broken", expected, f"reordered: seq {row.seq} is listed in its place"
                )
            return Broken("broken", expected, f"deleted: the next row is seq {row.seq}")
        if isinstance(row, Unreadable):
            return Broken("broken", row.seq, f"unreadable: {row.why}")
        if row.prev_hash != prev:
            why = "its prev_hash is not the hash of the row before it (that row was rewritten)"
            return Broken("broken", row.seq, why)
        if row_hash(row, key) != row.hash:
            why = "edited: its hash does not match its content" + (
                " (or the key is not the one it was written with)" if key else ""
            )
            return Broken("broken", row.seq, why)
        prev, expected = row.hash, expected + 1
    if chain_seq is not None and chain_seq >= expected:
        why = f"truncated: the chain head is at seq {chain_seq}, the log ends at seq {expected - 1}"
        return Broken("broken", expected, why)
    hashes = {row.hash for row in rows if isinstance(row, AuditRow)}
    if head is not None and head != GENESIS and head not in hashes:
        why = f"truncated: head {head} is no longer in the chain"
        return Broken("broken", expected, why)
    return Intact("intact", len(rows), prev)


def _why(row: AuditEntry) -> str:
    return row.why if isinstance(row, Unreadable) else "its seq cannot be read"


async def chain_existing_rows(tx: Tx) -> None:
    """Migration step: give the rows written before the chain their `seq`, `prev_hash` and
    `hash`, in id order, and start the chain head after them (inside the migration's
    transaction, with the update trigger lifted around it by the step's DDL)."""
    key, prev, seq, last_id = audit_key(), GENESIS, 0, 0
    for raw in await tx.fetch_all("SELECT * FROM audit ORDER BY id"):
        data = dict(raw)
        if isinstance(data["details"], str):
            data["details"] = json.loads(data["details"])
        seq += 1
        row = AuditRow.model_validate({**data, "seq": seq, "prev_hash": prev, "hash": ""})
        digest = row_hash(row, key)
        await tx.execute(
            "UPDATE audit SET seq = :seq, prev_hash = :prev, hash = :hash WHERE id = :id",
            {"seq": seq, "prev": prev, "hash": digest, "id": row.id},
        )
        prev, last_id = digest, row.id
    await tx.execute(
        "INSERT INTO audit_chain (singleton, seq, hash, last_id) VALUES (1, :seq, :hash, :id)",
        {"seq": seq, "hash": prev, "id": last_id},
    )


async def record_key_fingerprint(tx: Tx) -> None:
    """Migration step: the chain head records how its rows are hashed, when the migrating
    process can tell (its key, or none, verifies the last row); else nothing yet, and the
    first append whose key verifies the last row records it (`StoreCore._locked_head`)."""
    mark = await last_row_mark(tx, audit_key())
    await tx.execute("UPDATE audit_chain SET key_fingerprint = :mark", {"mark": mark})


async def last_row_mark(tx: Tx, key: bytes | None) -> str | None:
    """`key_mark(key)` if `key` verifies the chain's last row (or there is none: an empty
    chain takes its first writer's), else None."""
    raw = await tx.fetch_one("SELECT * FROM audit WHERE seq IS NOT NULL ORDER BY seq DESC LIMIT 1")
    if raw is None:
        return None
    data = dict(raw)
    try:
        if isinstance(data["details"], str):
            data["details"] = json.loads(data["details"])
        row = AuditRow.model_validate(data)
    except ValueError:
        return None
    return key_mark(key) if row_hash(row, key) == row.hash else None
