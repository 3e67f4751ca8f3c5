"""Outside requests in the store (`bot.store.plane`), on every backend: one request per client
and idempotency key, one opener of a request cut short, one signing key, across stores."""

from __future__ import annotations

from datetime import timedelta

from bot.store import PlaneRequest

from .conftest import StoreFactory
from .helpers import T0, Clock


def _request(key: str | None = "k1", client: str = "ci") -> PlaneRequest:
    return PlaneRequest(
        id="",
        client=client,
        idempotency_key=key,
        tool="run_command",
        arguments='{"command":"echo hi"}',
        digest="abcdef123456",
        channel_id="C0OPS",
        requester="U0CI",
        state="pending",
        created_at=T0,
    )


async def test_one_request_per_client_and_key_across_stores(new_store: StoreFactory) -> None:
    async with new_store() as one, new_store() as two:
        first, created = await one.plane_record(_request(), audit={"client": "ci"})
        again, created_again = await two.plane_record(_request(), audit={"client": "ci"})
        assert (created, created_again) == (True, False)
        assert again.id == first.id
        other, created_other = await two.plane_record(_request(client="cd"), audit={})
        assert created_other and other.id != first.id
        _, unkeyed = await one.plane_record(_request(key=None), audit={})
        _, unkeyed_again = await one.plane_record(_request(key=None), audit={})
        assert unkeyed and unkeyed_again
        events = [r.event for r in await one.audit_rows()]
        assert events.count("plane_request") == 4


async def test_a_request_cut_while_opening_is_claimed_once(
    new_store: StoreFactory, clock: Clock
) -> None:
    grace = timedelta(seconds=30)
    async with new_store() as one, new_store() as two:
        record, _ = await one.plane_record(_request(), audit={})
        assert await one.plane_unopened(grace) == []
        clock.advance(seconds=31)
        [cut] = await two.plane_unopened(grace)
        assert cut.id == record.id
        claims = [
            await one.plane_claim_opening(cut, grace),
            await two.plane_claim_opening(cut, grace),
        ]
        assert claims == [True, False]


async def test_every_store_signs_with_the_one_key(new_store: StoreFactory) -> None:
    async with new_store() as one, new_store() as two:
        assert await one.plane_signing_key(lambda: "first") == "first"
        assert await two.plane_signing_key(lambda: "second") == "first"


async def test_a_burst_is_recorded_in_one_transaction_and_a_repeated_key_once(
    new_store: StoreFactory,
) -> None:
    async with new_store() as store:
        burst = [(_request("a"), {}), (_request("b"), {}), (_request("a"), {})]
        [(a, a_new), (b, b_new), (a_again, again_new)] = await store.plane_record_many(burst)
        assert (a_new, b_new, again_new) == (True, True, False)
        assert a_again.id == a.id != b.id
        assert [r.event for r in await store.audit_rows()].count("plane_request") == 2
