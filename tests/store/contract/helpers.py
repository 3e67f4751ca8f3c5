"""What the contract tests share: a hand-moved clock, the calls of a paused batch, and a paused
session built through the public interface only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from agent_core import ChatMessage, ToolApprovalRequest, ToolCallHeld, call_digest
from bot.store import Store, ToolCallRow
from tests.support.scripted import call
from tests.support.store_helpers import begin_run

__all__ = ["DROP", "RESTART", "STATUS", "T0", "Clock", "mention", "paused_session"]

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)

RESTART = call("call_restart", "restart_service", service="api", force=True)
STATUS = call("call_status", "service_status", service="api")
DROP = call("call_drop", "drop_cache", region="eu")


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **span: float) -> None:
        self.now += timedelta(**span)


def mention(user_id: str) -> str:
    """How the bot names a person (its `person` function): a Slack mention."""
    return f"<@{user_id}>"


async def paused_session(
    store: Store, *, thread: str = "1700000000.000100", requester: str = "UREQ"
) -> tuple[str, list[ToolCallRow]]:
    """A session whose last turn paused: two gated calls around one held sibling."""
    session = await store.get_or_create_session("T1", "C1", thread)
    await store.set_requester(session.id, requester)
    assert await begin_run(store, session.id)
    await store.append_messages(session.id, [ChatMessage.user("restart api please")])
    message = ChatMessage.assistant("On it.", (RESTART, STATUS, DROP))
    requests = [
        ToolApprovalRequest(
            c.id,
            c.name,
            c.parsed_arguments(),
            "desc",
            call_digest(c.name, c.parsed_arguments()),
        )
        for c in (RESTART, DROP)
    ]
    held = [ToolCallHeld(STATUS.id, STATUS.name, STATUS.parsed_arguments())]
    await store.record_pause(session.id, message, requests, held)
    return session.id, await store.batch_calls(session.id)
