"""Two real replicas on one PostgreSQL database, both of whose expiry timers look at the same
waiting call several times a second: each escalation step passes once and each reminder round
goes out once, in real time with short durations."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from bot.store import PostgresStore
from tests.support.postgres import postgres_cluster, postgres_url
from tests.support.replicas import POLICY, ReplicaSet, scripted_llm
from tests.support.slack_api import SlackAPIStandIn

__all__ = ["postgres_cluster", "postgres_url"]  # the fixtures this module uses

pytestmark = pytest.mark.processes

LADDER = (
    POLICY
    + """approvers = ["U0BOB"]
remind_every = "2s"
remind_max = 1
escalate = [
  {after = "2s", approvers = ["U0SECOND"]},
  {after = "4s", approvers = ["U0THIRD"]},
]
"""
)


@pytest.fixture
async def replicas(postgres_url: str, tmp_path: Path) -> AsyncIterator[ReplicaSet]:
    async with (
        scripted_llm() as llm,
        SlackAPIStandIn() as slack,
        httpx.AsyncClient(timeout=30) as http,
    ):
        bots = ReplicaSet(postgres_url, tmp_path, llm, slack, http, count=2)
        (tmp_path / "opsgate.toml").write_text(LADDER)
        try:
            await bots.start()
            yield bots
        finally:
            for replica in bots.replicas:
                if replica.alive:
                    await replica.kill()
            print(bots.log())  # shown by pytest when the test failed


def _dms(slack: SlackAPIStandIn, user: str, words: str) -> int:
    """Direct messages to `user` saying `words` (an escalation's or a reminder's)."""
    return sum(
        1
        for c in slack.calls_to("chat.postMessage")
        if c.ok and c.params.get("channel") == user and words in str(c.params.get("text"))
    )


async def test_each_step_and_reminder_once_on_two_replicas(
    replicas: ReplicaSet, postgres_url: str
) -> None:
    thread = await replicas.mention(replicas[0], "deploy api")
    await replicas.wait_card(thread)
    slack = replicas.slack
    for user in ("U0SECOND", "U0THIRD", "U0BOB"):
        await slack.wait_for(
            "chat.postMessage", where=lambda c, u=user: c.params.get("channel") == u, timeout=30
        )
    await replicas.stop()  # a duplicate that would come late has had every chance

    async with PostgresStore(postgres_url, migrate=False) as db:
        rows = await db.audit_rows()
    assert [r.details["step"] for r in rows if r.event == "escalated"] == [1, 2]
    [reminded] = [r for r in rows if r.event == "reminded"]
    assert _dms(slack, "U0SECOND", "escalated to you") == 1
    assert _dms(slack, "U0THIRD", "escalated to you") == 1
    for user in ("U0BOB", "U0SECOND", "U0THIRD"):
        # One round: whoever may decide when it comes gets one reminder, nobody two.
        assert _dms(slack, user, "Reminder") == (1 if user in reminded.details["to"] else 0)
    assert _dms(slack, "U0BOB", "Reminder") == 1
