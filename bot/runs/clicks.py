"""A click on a card, as any front end sees it (`Click`), and what the run service answers
(`Answer`): each click on a card, a Home tab or a form is one call of `RunService` taking a
`Click` and returning an `Answer`, which the front end renders and nothing more.

A `Click` carries what the clicked card showed (its digests): an approval counts only toward
the call as it was shown, so a card drawn before an edit, or a terminal prompt printed before
one, approves nothing (the store checks it, in the decision's transaction). An `Answer` is the
notice for the clicker alone, the thread it belongs in (looked up once, when the click did not
say), the Home tabs to republish, and the form to open when the click opens one.

A click whose decision the database refused (full disk, read-only file) is answered that it
was not saved, and the write health that `/readyz` reads records it: the click was
acknowledged already, so the person must know to click again once the operator fixed the
database.

Only Home tabs somebody has seen are republished: a person who never opened theirs (or not
lately) gets it drawn fresh when they open it, so publishing it on every click would only cost
a `views.publish` and the queries behind it, on the event loop that acknowledges the next
clicks (docs/architecture.md, "Home tab").

The good/bad clicks under a final answer (`Feedback`) are here too: a vote is a click like any
other, and only `Clicks` and the service's entry for it call them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping
from contextlib import suppress
from dataclasses import dataclass

from ..observability.metrics import FeedbackValue
from ..store import HomeViewer, SessionRow, StoreError
from .break_glass import FreezeDesk
from .context import RunContext
from .decisions import Cancels, Decisions
from .edits import Allowances, Edits
from .gate import authorize_on
from .notices import NotAllowed, Notice, NotSaved, UnknownRequest
from .output import Thread
from .people import Home
from .views import AllowForm, EditErrors, EditForm

__all__ = [
    "PRE_CHECK_SECONDS",
    "Answer",
    "Click",
    "Clicks",
    "Feedback",
    "Form",
    "GlassForm",
    "RejectForm",
]

logger = logging.getLogger("opsgate.clicks")

PRE_CHECK_SECONDS = 1.0
"""How long a click that opens a form (Reject, Break glass) waits for its check before the
form opens anyway: Slack honours the click's `trigger_id` for 3 seconds only, and submitting
the form checks again."""


@dataclass(frozen=True, slots=True)
class Click:
    """A click on a call's card (or its Home tab copy, or a form it opened), from any front
    end: who clicked, on what, and what they were shown."""

    ledger_id: str
    """The call (or, for Revoke, the allowance): the only thing a card's buttons carry."""
    user: str
    team: str | None
    """The clicker's workspace (not the channel's, in a Slack Connect channel); None where
    the front end has none (the terminal) or the click hides it."""
    thread: Thread | None = None
    """The card's thread, for a private answer; None if the click does not say."""
    digest: str | None = None
    """The digest of the arguments the card showed; None if it does not say."""
    preview_digest: str | None = None
    """Its preview's digest, on a card that showed a preview."""


@dataclass(frozen=True, slots=True)
class RejectForm:
    """Ask why the call is rejected, offering the policy's reasons."""

    ledger_id: str
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class GlassForm:
    """Ask why glass is broken on a call a change freeze blocks (as shown: `digest`)."""

    ledger_id: str
    digest: str | None


Form = RejectForm | GlassForm | EditForm | AllowForm
"""A form a click opens."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What a click changed for the people who see it."""

    notice: Notice | None = None
    """For the clicker alone."""
    thread: Thread | None = None
    """Where the notice goes (the card's thread); None: nowhere to say it."""
    homes: tuple[HomeViewer, ...] = ()
    """Whose Home tabs to republish: the clicker's and those of the people the click affects
    (each owed, drawn when it is sent, once per burst of changes)."""
    form: Form | None = None
    """The form to open with the click's trigger."""
    errors: EditErrors | None = None
    """A submitted edit form's errors: the form stays open and shows them."""


class Clicks:
    """Every click's one call (see the module docstring)."""

    def __init__(
        self,
        ctx: RunContext,
        *,
        decisions: Decisions,
        edits: Edits,
        allowances: Allowances,
        cancels: Cancels,
        freezes: FreezeDesk,
        home: Home,
        feedback: Feedback,
    ) -> None:
        self.ctx = ctx
        self.decisions = decisions
        self.edits = edits
        self.allowances = allowances
        self.cancels = cancels
        self.freezes = freezes
        self.home = home
        self.feedback = feedback

    # -- Approve and Reject -----------------------------------------------------------------

    async def approve(self, click: Click) -> Answer:
        """Approve the call as shown (its digests); the card redraws, the run resumes once
        its batch is decided."""
        decided = self.decisions.decide(
            click.ledger_id,
            "approved",
            user=click.user,
            team=click.team,
            digest=click.digest,
            preview_digest=click.preview_digest,
        )
        # A card in a channel: the clicker's tab only if they opened it.
        return await self._settled(click, decided, clicker_tab=click.thread is None)

    async def reject_form(self, click: Click) -> Answer:
        """Reject: the form asking why, unless the clicker may not reject (a slow user-group
        lookup must not eat the trigger: see `PRE_CHECK_SECONDS`)."""
        check = self.decisions.check_reject(click.ledger_id, user=click.user, team=click.team)
        refusal = await _in_time(check)
        if refusal is not None:
            return await self._told(click, refusal)
        form = RejectForm(click.ledger_id, tuple(self.ctx.policy.reject_reasons))
        return Answer(thread=click.thread, form=form)

    async def reject(self, click: Click, reason: str | None) -> Answer:
        """The reject form submitted."""
        decided = self.decisions.decide(
            click.ledger_id, "rejected", user=click.user, team=click.team, reason=reason
        )
        return await self._settled(click, decided)

    async def cancel_run(self, click: Click) -> Answer:
        """Cancel run: the call's paused run ends, its calls rejected."""
        cancelled = self.cancels.from_card(click.ledger_id, user=click.user, team=click.team)
        return await self._settled(click, cancelled, homes=False)

    async def rerun_preview(self, click: Click) -> Answer:
        """Re-run preview: the call's preview is run again and its card redrawn."""
        rerun = self.decisions.previews.rerun(click.ledger_id, user=click.user, team=click.team)
        return await self._settled(click, rerun, homes=False)

    # -- Edit and Allow ---------------------------------------------------------------------

    async def edit_form(self, click: Click) -> Answer:
        """Edit: the form with the call's arguments, or why not."""
        form = await self.edits.form(click.ledger_id, user=click.user, team=click.team)
        if isinstance(form, EditForm):  # its thread: where to say it failed to open
            return Answer(thread=await self._thread(click), form=form)
        return await self._told(click, form)

    async def submit_edit(self, click: Click, values: Mapping[str, str | None]) -> Answer:
        """The edit form submitted: the edited call approved, or the form's errors."""
        errors: list[EditErrors] = []

        async def submitted() -> Notice | None:
            result = await self.edits.submit(
                click.ledger_id, values, user=click.user, team=click.team
            )
            if isinstance(result, EditErrors):
                errors.append(result)
                return None
            return result

        answer = await self._settled(click, submitted(), homes=False)
        if errors:
            return Answer(errors=errors[0])
        return Answer(answer.notice, answer.thread, await self._homes(click))

    async def allow(self, click: Click) -> Answer:
        """Allow for <duration>: the dialog choosing a shape when the policy offers several,
        else the allowance granted at once (approving the call as shown)."""
        form = await self.edits.allow_form(click.ledger_id, user=click.user, team=click.team)
        if isinstance(form, AllowForm):
            return Answer(thread=click.thread, form=form)
        if form is not None:
            return await self._told(click, form)
        allowed = self.edits.allow(
            click.ledger_id, user=click.user, team=click.team, digest=click.digest
        )
        return await self._settled(click, allowed, clicker_tab=click.thread is None)

    async def allow_chosen(self, click: Click, choice: int | None) -> Answer:
        """The Allow dialog submitted, with the shape chosen."""
        allowed = self.edits.allow(
            click.ledger_id, user=click.user, team=click.team, digest=click.digest, choice=choice
        )
        return await self._settled(click, allowed)

    async def revoke(self, click: Click) -> Answer:
        """Revoke an allowance (`click.ledger_id` names it); the Home tabs that list it."""
        allowance = await self.ctx.store.get_allowance(click.ledger_id)
        notice = await self.allowances.revoke(click.ledger_id, user=click.user, team=click.team)
        channel = allowance.channel_id if allowance is not None else None
        homes = await self._homes(click, on_call=False, channel=channel)
        return Answer(notice, click.thread, homes)

    # -- change freezes ---------------------------------------------------------------------

    async def glass_form(self, click: Click) -> Answer:
        """Break glass: the form asking why, unless the clicker may not."""
        check = self.freezes.check_break_glass(click.ledger_id, user=click.user, team=click.team)
        refusal = await _in_time(check)
        if refusal is not None:
            return await self._told(click, refusal)
        return Answer(thread=click.thread, form=GlassForm(click.ledger_id, click.digest))

    async def break_glass(self, click: Click, reason: str) -> Answer:
        """The break-glass form submitted: the frozen call approved, for review later."""
        broken = self.freezes.break_glass(
            click.ledger_id, user=click.user, team=click.team, reason=reason, digest=click.digest
        )
        return await self._settled(click, broken)

    async def review(self, click: Click) -> Answer:
        """Mark reviewed: someone else's break-glass use."""
        reviewed = self.freezes.review(click.ledger_id, user=click.user, team=click.team)
        return await self._settled(click, reviewed)

    # -- feedback on an answer --------------------------------------------------------------

    async def rate(
        self, session_id: str, *, user: str, team: str | None, value: FeedbackValue, message_ts: str
    ) -> Answer:
        """Good or bad under a final answer. No notice: recorded (a bad one opens the "what
        was wrong?" form); an unknown session is ignored (an `UnknownRequest` notice with no
        thread)."""
        notice = await self.feedback.give(
            session_id, user=user, team=team, value=value, message_ts=message_ts
        )
        return await self._feedback(session_id, notice)

    async def explain(
        self, session_id: str, *, user: str, team: str | None, message_ts: str, reason: str
    ) -> Answer:
        """The "what was wrong?" form submitted."""
        notice = await self.feedback.explain(
            session_id, user=user, team=team, message_ts=message_ts, reason=reason
        )
        return await self._feedback(session_id, notice)

    async def _feedback(self, session_id: str, notice: Notice | None) -> Answer:
        if isinstance(notice, UnknownRequest):
            logger.info("feedback on unknown session %s ignored", session_id)
            return Answer(notice)
        if notice is None:
            return Answer()
        return Answer(notice, await self.feedback.thread(session_id))

    # -- the answer -------------------------------------------------------------------------

    async def _settled(
        self,
        click: Click,
        work: Awaitable[Notice | None],
        *,
        homes: bool = True,
        clicker_tab: bool = True,
    ) -> Answer:
        """The click's work done, its notice placed, the Home tabs it changed drawn. A
        `StoreError` from the work is recorded and answered (see the module docstring)."""
        try:
            notice = await work
            thread = await self._thread(click) if notice is not None else click.thread
        except StoreError as exc:
            self.ctx.health.failed("saving a click", exc)
            logger.error("a click by %s on %s was not saved: %s", click.user, click.ledger_id, exc)
            notice, thread = NotSaved("click"), click.thread
            if thread is None:
                with suppress(StoreError):  # reading may fail too: nowhere to answer
                    thread = await self.decisions.thread_of_call(click.ledger_id)
        views = await self._homes(click, clicker_tab=clicker_tab) if homes else ()
        return Answer(notice, thread, views)

    async def _told(self, click: Click, notice: Notice) -> Answer:
        return Answer(notice, await self._thread(click))

    async def _thread(self, click: Click) -> Thread | None:
        """The card's thread: the click's, else the call's (a click on the Home tab)."""
        return click.thread or await self.decisions.thread_of_call(click.ledger_id)

    async def _homes(
        self,
        click: Click,
        *,
        on_call: bool = True,
        channel: str | None = None,
        clicker_tab: bool = True,
    ) -> tuple[HomeViewer, ...]:
        """The Home tabs to republish after a decision on the clicked call (or a change to
        `channel`'s allowances): the clicker's, and those of the people who opened theirs
        lately and see the change (the call's requester, its channel's approvers).

        `clicker_tab`: the clicker's own tab even if the store does not list them as a recent
        opener (the click came from the Home tab, or from where it does not say); `on_call`:
        the click names a call (not an allowance). A database
        that does not answer republishes nothing: the click's notice is told all the same."""
        ledger_id = click.ledger_id if on_call else None
        try:
            viewers = await self.ctx.store.home_viewers()
            people: dict[str, str | None] = {}
            if clicker_tab or any(viewer.user_id == click.user for viewer in viewers):
                people[click.user] = click.team
            if viewers:
                affected = await self.home.affected(
                    ledger_id=ledger_id, channel=channel, viewers=viewers
                )
                for viewer in affected:
                    people.setdefault(viewer.user_id, viewer.team_id)
            return tuple(HomeViewer(user_id=user, team_id=team) for user, team in people.items())
        except StoreError as exc:
            logger.warning("no Home tab republished after a click by %s: %s", click.user, exc)
            return ()


async def _in_time(check: Awaitable[Notice | None]) -> Notice | None:
    """The check's refusal, or None when it is not done in `PRE_CHECK_SECONDS`."""
    try:
        return await asyncio.wait_for(check, PRE_CHECK_SECONDS)
    except TimeoutError:
        return None


# -- feedback under an answer -----------------------------------------------------------------
# Feedback on a run's final answer: one vote per person per answer, the latest counts. A click
# is a vote (`Store.vote`): a first vote or a change of mind is audited (`feedback`: who, good or
# bad, the vote it replaces, the session and the answer's message) and counted
# (`opsgate_feedback_total{value}`, and `opsgate_feedback_withdrawn_total{value}` for the vote a
# change of mind takes back); a repeated click changes nothing. The optional reason a "bad"
# click may add is audited too (`feedback_reason`). Both ask the one gate first
# (`authorize_on`, action `feedback`): a click that hides its workspace is refused, as on every
# other surface.
#
# Its own module, not a part of `service.py`: it is neither intake nor a run step, and the
# listeners reach it as `RunService.feedback`.


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
