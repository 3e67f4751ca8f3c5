"""Three real `opsgate run --http` replicas on one PostgreSQL database (docs/architecture.md).

Requests are spread across the replicas' ports as a load balancer would; short leases (2 s,
heartbeat 0.4 s) keep the crash cases quick. Each test waits on what it expects to see (a
Slack call, a line in the tools' log), then stops the replicas gracefully before its final
counts, so a duplicate that would have come late has had every chance to show.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from bot.store import PostgresStore
from tests.support.postgres import postgres_cluster, postgres_url
from tests.support.replicas import ReplicaSet, scripted_llm, thread_texts
from tests.support.slack_api import SlackAPIStandIn

__all__ = ["postgres_cluster", "postgres_url"]  # the fixtures this module uses


@pytest.fixture
async def replicas(postgres_url: str, tmp_path: Path) -> AsyncIterator[ReplicaSet]:
    async with (
        scripted_llm() as llm,
        SlackAPIStandIn() as slack,
        httpx.AsyncClient(timeout=30) as http,
    ):
        bots = ReplicaSet(postgres_url, tmp_path, llm, slack, http)
        try:
            await bots.start()
            yield bots
        finally:
            for replica in bots.replicas:
                if replica.alive:
                    await replica.kill()
            print(bots.log())  # shown by pytest when the test failed


@pytest.fixture
async def db(postgres_url: str) -> AsyncIterator[PostgresStore]:
    async with PostgresStore(postgres_url, migrate=False) as store:
        yield store


async def _runner_pid(db: PostgresStore, thread_ts: str) -> int:
    """The process that claimed the thread's queued run (from the lease it registered)."""
    session = await db.find_session("T0TEST", "C0OPS", thread_ts)
    assert session is not None
    conn = await asyncpg.connect(db.url)
    try:
        name = await conn.fetchval(
            "SELECT i.name FROM run_queue AS q JOIN instances AS i ON i.id = q.instance_id "
            "WHERE q.session_id = $1",
            session.id,
        )
    finally:
        await conn.close()
    return int(str(name).rsplit(":", 1)[1])


async def test_a_click_on_another_replica_resumes_the_run(
    replicas: ReplicaSet, db: PostgresStore
) -> None:
    thread = await replicas.mention(replicas[0], "deploy api")
    card = await replicas.wait_card(thread)
    runner = replicas.by_pid(await _runner_pid(db, thread))
    other = next(r for r in replicas.replicas if r is not runner and r is not replicas[0])
    response = await replicas.click(other, card, user="U0BOB")
    assert response.status_code == 200
    await replicas.wait_text(thread, "DONE deployed api")
    await replicas.stop()
    assert [what for _, what in replicas.ran()] == ["deploy api"]
    assert len([t for t in thread_texts(replicas.slack, thread) if "DONE" in t]) == 1


async def test_one_event_delivered_to_two_replicas_is_answered_once(
    replicas: ReplicaSet, db: PostgresStore
) -> None:
    body, thread = replicas.mention_body("status please")
    first, second = await asyncio.gather(
        replicas.post(replicas[0], body, "application/json"),
        replicas.post(replicas[1], body, "application/json"),
    )
    assert (first.status_code, second.status_code) == (200, 200)
    await replicas.wait_text(thread, "ANSWER status please")
    await replicas.stop()
    assert len(replicas.llm.requests) == 1
    assert len([t for t in thread_texts(replicas.slack, thread) if "ANSWER" in t]) == 1
    assert len(await db.queue_items()) == 1


async def test_racing_clicks_on_two_replicas_make_one_decision(
    replicas: ReplicaSet, db: PostgresStore
) -> None:
    thread = await replicas.mention(replicas[2], "deploy web")
    card = await replicas.wait_card(thread)
    bob, carol = await asyncio.gather(
        replicas.click(replicas[0], card, user="U0BOB"),
        replicas.click(replicas[1], card, user="U0CAROL"),
    )
    assert (bob.status_code, carol.status_code) == (200, 200)
    await replicas.wait_text(thread, "DONE deployed web")
    await replicas.stop()
    decisions = [r for r in await db.audit_rows() if r.event == "decision"]
    assert len(decisions) == 1 and decisions[0].actor in ("U0BOB", "U0CAROL")
    loser = "U0CAROL" if decisions[0].actor == "U0BOB" else "U0BOB"
    refusals = [r for r in await db.audit_rows() if r.event == "refusal"]
    assert [r.actor for r in refusals] == [loser]
    assert [what for _, what in replicas.ran()] == ["deploy web"]


async def test_a_replica_killed_mid_call_is_reported_by_a_survivor_and_not_rerun(
    replicas: ReplicaSet, db: PostgresStore
) -> None:
    thread = await replicas.mention(replicas[0], "hang forever")
    card = await replicas.wait_card(thread)
    await replicas.click(replicas[1], card, user="U0BOB")
    victim = replicas.by_pid(await replicas.wait_ran("hang forever"))
    await victim.kill()
    [warning] = await replicas.wait_text(thread, "was running", timeout=30)
    assert "`hang`" in warning and "not run again" in warning
    await replicas.stop()
    assert [what for _, what in replicas.ran()] == ["hang forever"]
    row = await db.get_call(card["ledger_id"])
    assert row is not None and row.status == "interrupted"
    interrupted = [r for r in await db.audit_rows() if r.event == "interrupted"]
    assert len(interrupted) == 1


async def test_a_replica_killed_with_a_card_pending_leaves_the_click_to_another(
    replicas: ReplicaSet, db: PostgresStore
) -> None:
    thread = await replicas.mention(replicas[0], "deploy db")
    card = await replicas.wait_card(thread)
    victim = replicas.by_pid(await _runner_pid(db, thread))
    await victim.kill()
    survivor = next(r for r in replicas.replicas if r.alive)
    response = await replicas.click(survivor, card, user="U0BOB")
    assert response.status_code == 200
    await replicas.wait_text(thread, "DONE deployed db")
    await replicas.stop()
    [(pid, what)] = replicas.ran()
    assert what == "deploy db" and pid != victim.pid


async def test_a_rolling_restart_answers_every_acknowledged_mention_once(
    replicas: ReplicaSet,
) -> None:
    channels = itertools.cycle(["C0OPS", "C0WEB", "C0DB"])
    acknowledged: dict[str, str] = {}  # thread ts -> text
    turn = itertools.count()

    async def send(n: int) -> None:
        body, ts = replicas.mention_body(f"question {n}", channel=next(channels))
        # Like Slack: an event that got no 200 is sent again, here to the next replica.
        for _ in range(20):
            live = [r for r in replicas.replicas if r.alive]
            replica = live[next(turn) % len(live)]
            try:
                response = await replicas.post(replica, body, "application/json")
            except httpx.TransportError:
                continue
            if response.status_code == 200:
                acknowledged[ts] = f"question {n}"
                return
        raise AssertionError(f"mention {n} was never acknowledged")

    async def stream(count: int) -> None:
        for n in range(count):
            await send(n)

    async def restart_each() -> None:
        for replica in replicas.replicas:
            code = await replica.stop()
            assert code == 0, "\n".join(replica.log[-40:])
            await replica.start()
            await replica.wait_listening()

    await asyncio.gather(stream(45), restart_each())
    for ts, text in acknowledged.items():
        await replicas.wait_text(ts, f"ANSWER {text}", timeout=60)
    await replicas.stop()
    assert len(acknowledged) == 45
    for ts, text in acknowledged.items():
        answered = [t for t in thread_texts(replicas.slack, ts) if t.startswith("ANSWER")]
        assert answered == [f"ANSWER {text}"], (ts, answered)
