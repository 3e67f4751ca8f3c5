"""The audit chain on both databases: every row chained as pinned, and edits, deletions,
reorderings and truncations made behind the store's back (by someone who drops the append-only
triggers, as a database owner can) found at the right seq."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import sqlite3
from typing import Any

import pytest

from bot.store import Store
from bot.store.chain import GENESIS, Broken, Intact, KeyMismatch, key_mark, verify_chain

from .conftest import StoreFactory


async def _raw(store: Store, *statements: str) -> None:
    """Run SQL on the store's database directly, the append-only triggers dropped first."""
    if hasattr(store, "path"):

        def run() -> None:
            conn = sqlite3.connect(store.path)
            with conn:
                conn.execute("DROP TRIGGER IF EXISTS audit_no_update")
                conn.execute("DROP TRIGGER IF EXISTS audit_no_delete")
                for statement in statements:
                    conn.execute(statement)
            conn.close()

        await asyncio.to_thread(run)
        return
    import asyncpg

    conn = await asyncpg.connect(store.url)  # type: ignore[attr-defined]
    try:
        await conn.execute("ALTER TABLE audit DISABLE TRIGGER USER")
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def _three(store: Store) -> None:
    await store.audit("request", actor="U1", details={"tool": "run_command", "n": 1})
    await store.audit("decision", actor="U2", call_id="call_1", details={"text": "ünï 🚀"})
    await store.audit("expiry", actor=None, details={"ratio": 0.25, "ids": ["a", "b"]})


async def _verdict(store: Store, *, key: bytes | None = None, head: str | None = None) -> Any:
    recorded = await store.audit_head()
    rows = await store.audit_entries()
    return verify_chain(rows, key=key, keyed=recorded.keyed, head=head, chain_seq=recorded.seq)


async def test_rows_are_chained_exactly_as_pinned(store: Store) -> None:
    assert await store.audit_chain_head() == (0, GENESIS)
    await _three(store)
    rows = await store.audit_rows()
    assert [r.seq for r in rows] == [1, 2, 3]
    prev = GENESIS
    for row in rows:
        # The pinned definition, spelled out independently of bot.store.chain.
        data = row.model_dump(mode="json")
        assert data.pop("hash") == row.hash
        canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert row.prev_hash == prev
        assert row.hash == hashlib.sha256(canonical.encode() + prev.encode()).hexdigest()
        prev = row.hash
    assert await store.audit_chain_head() == (3, prev)
    assert await _verdict(store) == Intact("intact", 3, prev)


async def test_an_edited_row_fails_at_its_seq(store: Store) -> None:
    await _three(store)
    await _raw(store, "UPDATE audit SET actor = 'UEVIL' WHERE seq = 2")
    verdict = await _verdict(store)
    assert isinstance(verdict, Broken) and verdict.seq == 2 and "edited" in verdict.why


async def test_a_rehashed_row_breaks_the_link_of_the_next(store: Store) -> None:
    """Rewriting a row's hash to match its edit moves the failure to the row after it."""
    await _three(store)
    await _raw(store, "UPDATE audit SET hash = 'f' || substr(hash, 2) WHERE seq = 2")
    verdict = await _verdict(store)
    assert isinstance(verdict, Broken) and verdict.seq == 2
    await _raw(store, "UPDATE audit SET prev_hash = 'f' || substr(prev_hash, 2) WHERE seq = 3")
    verdict = await _verdict(store)
    assert isinstance(verdict, Broken) and verdict.seq == 2


async def test_a_deleted_row_is_named(store: Store) -> None:
    await _three(store)
    await _raw(store, "DELETE FROM audit WHERE seq = 2")
    verdict = await _verdict(store)
    assert isinstance(verdict, Broken) and verdict.seq == 2 and "deleted" in verdict.why


async def test_reordered_rows_are_named(store: Store) -> None:
    await _three(store)
    await _raw(
        store,
        "UPDATE audit SET seq = -1 WHERE seq = 2",
        "UPDATE audit SET seq = 2 WHERE seq = 3",
        "UPDATE audit SET seq = 3 WHERE seq = -1",
    )
    verdict = await _verdict(store)
    assert isinstance(verdict, Broken) and verdict.seq == 2 and "reordered" in verdict.why


async def test_truncation_shows_against_the_chain_head_or_a_head_kept_elsewhere(
    store: Store,
) -> None:
    await _three(store)
    kept = (await store.audit_rows())[-1].hash
    await _raw(store, "DELETE FROM audit WHERE seq = 3")
    verdict = await _verdict(store)
    assert isinstance(verdict, Broken) and verdict.seq == 3 and "truncated" in verdict.why
    # Whoever cut the log also rewound the head: only a head kept elsewhere shows it now.
    second = (await store.audit_rows())[-1].hash
    await _raw(store, f"UPDATE audit_chain SET seq = 2, hash = '{second}'")
    assert isinstance(await _verdict(store), Intact)
    verdict = await _verdict(store, head=kept)
    assert isinstance(verdict, Broken) and verdict.seq == 3 and kept in verdict.why
    assert isinstance(await _verdict(store, head=second), Intact)


async def test_with_a_key_the_hashes_are_hmacs_and_a_wrong_key_fails(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPSGATE_AUDIT_KEY", "s3cret")
    await _three(store)
    rows = await store.audit_rows()
    data = rows[0].model_dump(mode="json")
    data.pop("hash")
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    expected = hmac.new(b"s3cret", canonical.encode() + GENESIS.encode(), hashlib.sha256)
    assert rows[0].hash == expected.hexdigest()
    assert isinstance(await _verdict(store, key=b"s3cret"), Intact)
    assert (await store.audit_head()).keyed == key_mark(b"s3cret")
    for wrong in (None, b"guess"):
        verdict = await _verdict(store, key=wrong)
        assert isinstance(verdict, KeyMismatch), verdict


async def test_three_stores_appending_at_once_keep_one_gap_free_chain(
    new_store: StoreFactory,
) -> None:
    async def write(name: str) -> None:
        async with new_store() as mine:
            for n in range(25):
                await mine.audit("request", actor=name, details={"n": n})

    async with new_store() as reader:
        await asyncio.wait_for(asyncio.gather(*(write(f"U{i}") for i in range(3))), 120)
        rows = await reader.audit_rows()
        assert [r.seq for r in rows] == list(range(1, 76))
        assert isinstance(await _verdict(reader), Intact)


async def test_since_and_after_seq_select_rows(store: Store) -> None:
    await _three(store)
    assert [r.seq for r in await store.audit_rows(after_seq=1)] == [2, 3]
    assert [r.seq for r in await store.audit_rows(after_seq=0, limit=2)] == [1, 2]


async def test_numbers_in_details_read_back_as_they_were_hashed(store: Store) -> None:
    """jsonb keeps numbers as numeric: a float it prints differently must not break the chain."""
    await store.audit("x", actor=None, details={"big": 1e16, "tiny": 1e-7, "one": 1.0, "n": 10**20})
    assert isinstance(await _verdict(store), Intact)


class _RolledBack(Exception):
    pass


async def test_an_append_rolled_back_leaves_no_gap_and_the_next_one_finds_the_head(
    store: Store,
) -> None:
    """The store tries the head its last append left; that append was rolled back, so the
    try inserts nothing and the append reads the head and goes after it."""
    await store.audit("request", actor="U1", details={"n": 1})
    db = store._db  # type: ignore[attr-defined]
    with pytest.raises(_RolledBack):
        async with db.transaction("test") as tx:
            await store._write_audit(tx, "request", actor="U1", details={"n": 2})  # type: ignore[attr-defined]
            raise _RolledBack
    await store.audit("request", actor="U1", details={"n": 3})
    rows = await store.audit_rows()
    assert [(r.seq, r.details["n"]) for r in rows] == [(1, 1), (2, 3)]
    assert isinstance(await _verdict(store), Intact)


async def test_appends_in_one_transaction_follow_each_other(store: Store) -> None:
    """The second append of a transaction goes after the first (on PostgreSQL without reading
    the head again: the transaction holds it locked)."""
    db = store._db  # type: ignore[attr-defined]
    async with db.transaction("test") as tx:
        for n in range(3):
            await store._write_audit(tx, "cancel", actor="U1", details={"n": n})  # type: ignore[attr-defined]
    assert [r.seq for r in await store.audit_rows()] == [1, 2, 3]
    assert isinstance(await _verdict(store), Intact)


async def test_a_store_behind_another_one_appends_after_it(new_store: StoreFactory) -> None:
    """Two stores on one database take turns: each one's known head goes stale every time."""
    async with new_store() as first, new_store() as second:
        for n in range(4):
            await (first if n % 2 else second).audit("request", actor="U1", details={"n": n})
        assert [r.seq for r in await first.audit_rows()] == [1, 2, 3, 4]
        assert isinstance(await _verdict(first), Intact)


async def test_concurrent_appends_in_one_store_follow_links_not_yet_committed(
    store: Store,
) -> None:
    """Forty appends at once on one store (PostgreSQL: as many transactions as its pool holds),
    one of them rolled back after its link was written: each append first tries to follow the
    store's last link, committed or not; the chain stays gap-free and intact, the rolled-back
    link leaves nothing, and the append that had followed it finds the head instead."""
    db = store._db  # type: ignore[attr-defined]
    written = asyncio.Event()

    async def doomed() -> None:
        with pytest.raises(_RolledBack):
            async with db.transaction("test") as tx:
                await store._write_audit(tx, "request", actor="U0", details={"n": -1})  # type: ignore[attr-defined]
                written.set()
                for _ in range(50):  # loop turns (not time) for the others to queue behind it
                    await asyncio.sleep(0)
                raise _RolledBack

    async def append(n: int) -> None:
        if n >= 20:
            await asyncio.wait_for(written.wait(), 30)
        await store.audit("request", actor="U1", details={"n": n})

    await asyncio.wait_for(asyncio.gather(doomed(), *(append(n) for n in range(40))), 120)
    rows = await store.audit_rows()
    assert [r.seq for r in rows] == list(range(1, 41))
    assert sorted(r.details["n"] for r in rows) == list(range(40))
    assert isinstance(await _verdict(store), Intact)
    assert await store.audit_chain_head() == (40, rows[-1].hash)


async def test_concurrent_appends_in_one_store_are_one_insert_each(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forty appends at once, none rolled back: after the first (which reads the head: the
    store knows none yet) each one's insert follows the link before it, so the head is never
    read again (on PostgreSQL each waits on the head row behind the one it follows)."""
    reads = 0
    locked_head = type(store)._locked_head  # type: ignore[attr-defined]

    async def counted(self: Any, tx: Any) -> Any:
        nonlocal reads
        reads += 1
        return await locked_head(self, tx)

    monkeypatch.setattr(type(store), "_locked_head", counted)
    await store.audit("request", actor="U1", details={"n": -1})
    await asyncio.wait_for(
        asyncio.gather(*(store.audit("request", actor="U1", details={"n": n}) for n in range(40))),
        120,
    )
    assert reads == 1
    rows = await store.audit_rows()
    assert [r.seq for r in rows] == list(range(1, 42))
    assert isinstance(await _verdict(store), Intact)
