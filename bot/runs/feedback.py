"""Feedback on a run's final answer: a click is audited (`feedback`: who, good or bad, the
session and the answer's message) and counted (`opsgate_feedback_total{value}`); the optional
reason a "bad" click may add is audited too (`feedback_reason`).

Its own module, not a part of `service.py`: it is neither intake nor a run step, and the
listeners reach it as `RunService.feedback`.
"""

from __future__ import annotations

from ..observability.metrics import FeedbackValue
from .context import RunContext

__all__ = ["Feedback"]


class Feedback:
    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx

    async def give(
        self, session_id: str, *, user: str, value: FeedbackValue, message_ts: str
    ) -> bool:
        """Record one click; False (nothing recorded) when the session is unknown."""
        if await self.ctx.store.get_session(session_id) is None:
            return False
        await self.ctx.store.audit(
            "feedback",
            actor=user,
            session_id=session_id,
            details={"value": value, "message_ts": message_ts},
        )
        self.ctx.observer.feedback_given(value)
        return True

    async def explain(self, session_id: str, *, user: str, message_ts: str, reason: str) -> None:
        """What a "bad" click's modal said (the text is the user's, kept as given)."""
        if await self.ctx.store.get_session(session_id) is None:
            return
        await self.ctx.store.audit(
            "feedback_reason",
            actor=user,
            session_id=session_id,
            details={"message_ts": message_ts, "reason": reason},
        )
