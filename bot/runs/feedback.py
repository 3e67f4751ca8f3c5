"""Feedback on a run's final answer: one vote per person per answer, the latest counts. A click
is a vote (`Store.vote`): a first vote or a change of mind is audited (`feedback`: who, good or
bad, the vote it replaces, the session and the answer's message) and counted
(`opsgate_feedback_total{value}`, and `opsgate_feedback_withdrawn_total{value}` for the vote a
change of mind takes back); a repeated click changes nothing. The optional reason a "bad"
click may add is audited too (`feedback_reason`). Both ask the one gate first
(`authorize_on`, action `feedback`): a click that hides its workspace is refused, as on every
other surface.

Its own module, not a part of `service.py`: it is neither intake nor a run step, and the
listeners reach it as `RunService.feedback`.
"""

from __future__ import annotations

from ..observability.metrics import FeedbackValue
from ..store import SessionRow
from .context import RunContext
from .gate import authorize_on
from .notices import NotAllowed, Notice, UnknownRequest
from .output import Thread

__all__ = ["Feedback"]


class Feedback:
    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx

    async def give(
        self,
        session_id: str,
        *,
        user: str,
        team: str | None,
        value: FeedbackValue,
        message_ts: str,
    ) -> Notice | None:
        """Record one click as `user`'s vote; else why not (`UnknownRequest`: the session is
        unknown)."""
        found = await self._allowed(session_id, user=user, team=team)
        if not isinstance(found, SessionRow):
            return found
        vote = await self.ctx.store.vote(session_id, message_ts, user=user, value=value)
        if vote.counted:
            self.ctx.observer.feedback_given(value, replaces=vote.replaces)
        return None

    async def explain(
        self, session_id: str, *, user: str, team: str | None, message_ts: str, reason: str
    ) -> Notice | None:
        """What a "bad" click's modal said (the text is the user's, kept as given)."""
        found = await self._allowed(session_id, user=user, team=team)
        if not isinstance(found, SessionRow):
            return found
        await self.ctx.store.audit(
            "feedback_reason",
            actor=user,
            session_id=session_id,
            details={"message_ts": message_ts, "reason": reason},
        )
        return None

    async def thread(self, session_id: str) -> Thread | None:
        """The thread of the answer feedback is about (to tell the person a refusal)."""
        session = await self.ctx.store.get_session(session_id)
        return None if session is None else Thread.of(session)

    async def _allowed(
        self, session_id: str, *, user: str, team: str | None
    ) -> SessionRow | Notice:
        session = await self.ctx.store.get_session(session_id)
        if session is None:
            return UnknownRequest()
        verdict = await authorize_on(self.ctx, "feedback", user=user, team=team, session=session)
        if verdict.kind == "refused":
            await self.ctx.store.audit(
                "refusal",
                actor=user,
                session_id=session_id,
                details={
                    "reason": verdict.reason,
                    "rule": verdict.rule,
                    "policy_rule": None,
                    "decision": "feedback",
                    "team_id": team,
                },
            )
            return NotAllowed(verdict)
        return session
