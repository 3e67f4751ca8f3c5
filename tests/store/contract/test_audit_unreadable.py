"""Audit rows edited by hand in SQL, on both databases: a row the store cannot read is listed
as such with its seq (the others still read), and verify names it; a keyed chain's head
records the key's fingerprint, so a log rewritten with plain SHA-256 never verifies."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from bot.store import Store, StoreError
from bot.store.chain import (
    GENESIS,
    Broken,
    Intact,
    KeyMismatch,
    Unreadable,
    key_mark,
    verify_chain,
)

from .conftest import StoreFactory
from .test_audit_chain import _raw


def _postgres(store: Store) -> bool:
    return not hasattr(store, "path")


async def _verdict(store: Store, key: bytes | None = None) -> Any:
    recorded = await store.audit_head()
    rows = await store.audit_entries()
    return verify_chain(rows, key=key, keyed=recorded.keyed, chain_seq=recorded.seq)


async def _three(store: Store) -> None:
    for n in range(3):
        await store.audit("request", actor=f"U{n}", details={"n": n})


async def test_a_row_with_details_that_are_not_an_object_is_listed_as_unreadable(
    store: Store,
) -> None:
    await _three(store)
    # SQLite holds the text as written (not JSON at all); jsonb only takes JSON (not an object).
    bad = "'[1, 2]'" if _postgres(store) else "'{\"n\": 1'"
    await _raw(store, f"UPDATE audit SET details = {bad} WHERE seq = 2")
    entries = await store.audit_entries()
    assert [type(e).__name__ for e in entries] == ["AuditRow", "Unreadable", "AuditRow"]
    assert isinstance(entries[1], Unreadable) and entries[1].seq == 2
    assert "details" in entries[1].why
    verdict = await _verdict(store)
    assert isinstance(verdict, Broken) and verdict.seq == 2 and "unreadable" in verdict.why
    with pytest.raises(StoreError, match="seq 2"):
        await store.audit_rows()


async def test_a_row_whose_seq_cannot_be_read_is_named_by_the_seq_it_holds_the_place_of(
    store: Store,
) -> None:
    await _three(store)
    if _postgres(store):
        await _raw(store, "ALTER TABLE audit ALTER COLUMN seq DROP NOT NULL")
    await _raw(store, "UPDATE audit SET seq = NULL WHERE seq = 2")
    entries = await store.audit_entries()
    assert [e.seq for e in entries] == [1, None, 3]
    verdict = await _verdict(store)
    assert isinstance(verdict, Broken) and verdict.seq == 2 and "unreadable" in verdict.why


async def test_the_head_of_a_keyed_chain_records_the_key_fingerprint(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert (await store.audit_head()).keyed is None  # empty: its first writer's key
    monkeypatch.setenv("OPSGATE_AUDIT_KEY", "k1")
    await _three(store)
    mark = key_mark(b"k1")
    assert mark.startswith("hmac-sha256:") and len(mark) == len("hmac-sha256:") + 16
    assert (await store.audit_head()).keyed == mark
    assert isinstance(await _verdict(store, b"k1"), Intact)
    missing = await _verdict(store, None)
    assert isinstance(missing, KeyMismatch) and "OPSGATE_AUDIT_KEY" in missing.why
    wrong = await _verdict(store, b"k2")
    assert isinstance(wrong, KeyMismatch) and "differs" in wrong.why


async def test_a_writer_without_the_chain_key_is_refused_not_appended(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPSGATE_AUDIT_KEY", "k1")
    await _three(store)
    monkeypatch.delenv("OPSGATE_AUDIT_KEY")
    with pytest.raises(StoreError, match="keyed"):
        await store.audit("request", actor="UEVIL", details={})
    assert [e.seq for e in await store.audit_entries()] == [1, 2, 3]


async def test_a_keyed_chain_rewritten_with_plain_sha256_never_verifies(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPSGATE_AUDIT_KEY", "k1")
    await _three(store)
    # Whoever owns the database recomputes every hash with plain SHA-256 (no key).
    prev = GENESIS
    for row in await store.audit_rows():
        data = row.model_dump(mode="json")
        data.pop("hash")
        data["prev_hash"] = prev
        body = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        digest = hashlib.sha256(body.encode() + prev.encode()).hexdigest()
        await _raw(
            store, f"UPDATE audit SET prev_hash = '{prev}', hash = '{digest}' WHERE seq = {row.seq}"
        )
        prev = digest
    await _raw(store, f"UPDATE audit_chain SET hash = '{prev}'")
    assert isinstance(await _verdict(store, None), KeyMismatch)  # the head still says keyed
    rehashed = await _verdict(store, b"k1")
    assert isinstance(rehashed, Broken) and rehashed.seq == 1 and "edited" in rehashed.why
    # And with the head rewritten too: whoever holds the key and verifies is told.
    await _raw(store, "UPDATE audit_chain SET key_fingerprint = 'sha256'")
    told = await _verdict(store, b"k1")
    assert isinstance(told, KeyMismatch) and "not keyed" in told.why
    await _raw(store, "UPDATE audit_chain SET key_fingerprint = NULL")  # "not recorded"
    rows = await _verdict(store, b"k1")
    assert isinstance(rows, Broken) and rows.seq == 1


async def test_an_empty_chain_takes_its_first_writers_key(
    new_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with new_store() as store:
        assert (await store.audit_head()).keyed is None
    monkeypatch.setenv("OPSGATE_AUDIT_KEY", "k1")
    async with new_store() as store:
        await store.audit("request", actor="U1", details={})
        assert (await store.audit_head()).keyed == key_mark(b"k1")


async def test_a_head_upgraded_without_the_key_takes_the_first_writer_whose_key_verifies(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`opsgate migrate` run without the key cannot tell how a keyed chain is hashed: the
    head records nothing, and the first append whose key verifies the last row records it."""
    monkeypatch.setenv("OPSGATE_AUDIT_KEY", "k1")
    await _three(store)
    await _raw(store, "UPDATE audit_chain SET key_fingerprint = NULL")
    monkeypatch.setenv("OPSGATE_AUDIT_KEY", "k2")
    with pytest.raises(StoreError, match="does not verify its last row"):
        await store.audit("request", actor="UEVIL", details={})
    assert (await store.audit_head()).keyed is None
    monkeypatch.setenv("OPSGATE_AUDIT_KEY", "k1")
    await store.audit("request", actor="U4", details={})
    assert (await store.audit_head()).keyed == key_mark(b"k1")
    assert isinstance(await _verdict(store, b"k1"), Intact)


async def test_an_empty_log_verifies_with_or_without_a_key(store: Store) -> None:
    assert isinstance(await _verdict(store, b"k1"), Intact)
    assert isinstance(await _verdict(store, None), Intact)
