"""The contract of change freezes and break-glass in the store: ad hoc freezes hold
on every store sharing the database, each freeze announcement is claimed once however many
replicas race for it (an end only after its start), and a break-glass use is recorded once and
reviewed once, never by its breaker."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from bot.store import Store
from tests.support.store_helpers import record_break_glass

from .conftest import StoreFactory
from .helpers import Clock


async def test_an_ad_hoc_freeze_is_seen_by_another_store_and_ends_once(
    new_store: StoreFactory, clock: Clock
) -> None:
    async with new_store(clock=clock) as first, new_store(clock=clock) as second:
        row = await first.start_freeze(
            channel_id="C0OPS",
            started_by="U0CAROL",
            reason="deploy",
            ends_at=clock.now + timedelta(hours=2),
        )
        [seen] = await second.ad_hoc_freezes(ending_after=clock.now)
        assert seen.id == row.id and seen.reason == "deploy" and seen.ends_at == row.ends_at
        assert await second.ad_hoc_freezes(ending_after=clock.now, channel_id="C0ELSE") == []
        assert len(await second.ad_hoc_freezes(ending_after=clock.now, channel_id="C0OPS")) == 1
        clock.advance(minutes=5)
        ended = await asyncio.gather(
            first.end_freezes(channel_id="C0OPS", ended_by="U0CAROL"),
            second.end_freezes(channel_id="C0OPS", ended_by="U0CAROL"),
        )
        assert sorted(len(e) for e in ended) == [0, 1]
        assert await first.ad_hoc_freezes(ending_after=clock.now) == []
        assert await first.end_freezes(channel_id="C0ELSE", ended_by="U0CAROL") == []


async def test_each_announcement_is_claimed_once_and_an_end_only_after_its_start(
    new_store: StoreFactory,
) -> None:
    async with new_store() as first, new_store() as second:
        details = {"freeze": "freezes[0]"}
        early = await first.claim_freeze_notice(
            "freezes[0]@t:ended", "freeze_ended", details=details, after="freezes[0]@t:started"
        )
        assert early is False
        claims = await asyncio.gather(
            *(
                s.claim_freeze_notice("freezes[0]@t:started", "freeze_started", details=details)
                for s in (first, second, first, second)
            )
        )
        assert sorted(claims) == [False, False, False, True]
        assert await second.claim_freeze_notice(
            "freezes[0]@t:ended", "freeze_ended", details=details, after="freezes[0]@t:started"
        )
        events = [a.event for a in await first.audit_rows()]
        assert events.count("freeze_started") == 1 and events.count("freeze_ended") == 1


async def test_break_glass_is_recorded_once_and_reviewed_once_never_by_its_breaker(
    store: Store,
) -> None:
    async def record(user: str) -> bool:
        return await record_break_glass(
            store,
            "L1",
            channel_id="C0OPS",
            user_id=user,
            reason="payments down",
            freeze="adhoc:x",
            session_id=None,
            call_id=None,
            details={"tool": "run_command"},
        )

    assert await record("U0DAVE") is True
    assert await record("U0ERIN") is False
    [open_item] = await store.unreviewed_break_glass()
    assert open_item.broken_by == "U0DAVE" and open_item.reason == "payments down"
    assert await store.review_break_glass("L1", user_id="U0DAVE") is None
    reviewed = await store.review_break_glass("L1", user_id="U0BOB")
    assert reviewed is not None and reviewed.reviewed_by == "U0BOB"
    assert await store.review_break_glass("L1", user_id="U0CAROL") is None
    assert await store.unreviewed_break_glass() == []
    [audited] = [a for a in await store.audit_rows() if a.event == "break_glass"]
    assert audited.actor == "U0DAVE" and audited.details["reason"] == "payments down"
    events = [a.event for a in await store.audit_rows()]
    assert events.count("break_glass_reviewed") == 1
