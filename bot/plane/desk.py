"""Outside requests through the one gate: a request that needs a person becomes a session whose
paused batch is its one call, so the same policy verdict, card, outbox, ledger, decisions,
expiry, audit chain and metrics apply as to the agent's own calls. OpsGate never runs it: the
run service settles such a session when its batch is decided instead of resuming a model
(`RunService.maybe_resume`), and the requester polls for the decision and its receipt.

Requests are recorded in group commits (`Recorder`): the requests that arrive while one
transaction is being written are written together in the next, so a burst costs a few
transactions, not one each.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from agent_core import ToolCall
from agent_core.messages import ChatMessage, ToolApprovalRequest, call_digest, canonical_arguments
from bot.errors import NotOpened

from ..allowances import covers, load_shape
from ..policy import GateDecision
from ..runs.cards import Cards, forbidden_reason
from ..runs.context import RunContext
from ..runs.freezes import freeze_for
from ..runs.gate import call_decision
from ..runs.output import PostFailed, Thread
from ..runs.views import CardRef
from ..settings import checkpoint
from ..store import AllowanceRow, PlaneRequest, PlaneState, Store, ToolCallRow
from ..tasks import TaskSupervisor
from .asks import Ask, Outside, argv_of
from .receipts import Claims, SigningKey, new_key_pem, sign

__all__ = [
    "Answer",
    "PlaneDesk",
    "Recorder",
    "call_id_of",
    "load_signing_key",
]

_Pending = tuple[PlaneRequest, dict[str, Any], "asyncio.Future[tuple[PlaneRequest, bool]]"]


class Recorder:
    """The writer runs as owned work of `tasks` (a graceful stop waits for it)."""

    def __init__(self, store: Store, tasks: TaskSupervisor) -> None:
        self.store = store
        self.tasks = tasks
        self._waiting: list[_Pending] = []
        self._writing = False

    async def record(
        self, request: PlaneRequest, audit: dict[str, Any]
    ) -> tuple[PlaneRequest, bool]:
        """`Store.plane_record`, committed with whatever else is waiting."""
        done: asyncio.Future[tuple[PlaneRequest, bool]] = asyncio.get_running_loop().create_future()
        self._waiting.append((request, audit, done))
        if not self._writing:
            self._writing = True
            try:
                self.tasks.spawn(self._write(), name="plane requests")
            except RuntimeError:  # stopping: no owner for it, so this request writes it
                await self._write()
        return await done

    async def _write(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                try:
                    results = await self.store.plane_record_many([(r, a) for r, a, _ in batch])
                except BaseException as exc:
                    for _, _, done in batch:
                        if not done.done():
                            done.set_exception(exc)
                    if not isinstance(exc, Exception):
                        raise
                    continue
                for (_, _, done), result in zip(batch, results, strict=True):
                    if not done.done():
                        done.set_result(result)
        finally:
            self._writing = False


POLL_INTERVAL = 1.0
"""The longest a long poll waits before reading the store again. A decision made here, or on
another replica (PostgreSQL's wake-ups reach `RunService.maybe_resume`), wakes it at once;
reading the shared store is the fallback for a missed wake-up."""

OPENING_GRACE = timedelta(seconds=30)
"""A request still without its batch this long after its opening began was cut short (the
opening is one Slack post and two writes): it is opened again."""

OPENING_AT_ONCE = 2
"""Requests opened at once (Slack posts one channel's messages one at a time anyway)."""

OPEN_RETRY_DELAYS = (1.0, 5.0)
"""Seconds before the further tries of a request whose thread Slack refused."""

logger = logging.getLogger("opsgate.plane")

_STATES = {
    "pending": "pending",
    "approved": "approved",
    "executing": "approved",
    "done": "approved",
    "rejected": "rejected",
    "cancelled": "rejected",
    "interrupted": "rejected",
    "expired": "expired",
}


@dataclass(frozen=True, slots=True)
class Answer:
    """What the API says of a request."""

    id: str
    state: str
    digest: str
    permalink: str | None = None
    decided_by: tuple[str, ...] = ()
    reason: str | None = None
    receipt: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def decided(self) -> bool:
        return self.state != "pending"

    def as_json(self, *, full: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "state": self.state, "digest": self.digest}
        if self.permalink:
            out["permalink"] = self.permalink
        if full:
            out |= {"decided_by": list(self.decided_by), "reason": self.reason}
            if self.receipt is not None:
                out["receipt"] = self.receipt
        return out


def call_id_of(request_id: str) -> str:
    """The tool call id of an outside request's one call."""
    return f"plane_{request_id}"


async def load_signing_key(store: Store, path: Path | None) -> SigningKey:
    """The receipts' key: the PEM file `path` (`OPSGATE_RECEIPT_KEY`), else the database's."""
    if path is not None:
        return SigningKey(await asyncio.to_thread(path.read_bytes))
    return SigningKey(await store.plane_signing_key(new_key_pem))


class PlaneDesk:
    def __init__(self, ctx: RunContext, cards: Cards, key: SigningKey) -> None:
        self.ctx = ctx
        self.cards = cards
        self.key = key
        self._recorder = Recorder(ctx.store, ctx.tasks)
        self._opening = asyncio.Semaphore(OPENING_AT_ONCE)
        """Requests opened at once: a burst's openings must not crowd out the next 201s."""

    # -- submitting --------------------------------------------------------------------------

    async def submit(self, client: str, where: Outside, ask: Ask) -> tuple[Answer, bool]:
        """Record the request (before the caller answers 201) and, when it needs a person,
        open its session and card; a repeated idempotency key returns the first request and
        False."""
        arguments = canonical_arguments(ask.arguments)
        decision = self.ctx.policy.decide(
            self.ctx.tools.get(ask.tool) or ask.tool,
            ToolCall(id="plane", name=ask.tool, arguments=arguments),
        )
        state: PlaneState = (
            "forbidden"
            if decision.forbidden
            else "pending"
            if decision.requires_approval
            else "allowed"
        )
        digest = call_digest(ask.tool, ask.arguments)
        rule = decision.policy_rule or decision.rule
        allowance = None
        if state == "pending":
            allowance = await self._allowance(ask, where.channel, decision)
            if allowance is not None:
                state = "allowed"
                rule = f"allowance {allowance.id} granted by {allowance.granted_by}"
        record, created = await self._recorder.record(
            PlaneRequest(
                id="",
                client=client,
                idempotency_key=ask.idempotency_key,
                tool=ask.tool,
                arguments=arguments,
                digest=digest,
                channel_id=where.channel,
                requester=where.requester,
                reason=ask.reason,
                state=state,
                rule=rule,
                created_at=self.ctx.clock(),
            ),
            {
                "client": client,
                "tool": ask.tool,
                "arguments": arguments,
                "digest": digest,
                "channel": where.channel,
                "reason": ask.reason,
                "state": state,
                "rule": decision.rule,
                "policy_rule": decision.policy_rule,
                "tier": decision.tier,
                "allowance": None if allowance is None else allowance.id,
            },
        )
        if created and record.state == "pending":
            # Saved: the 201 goes now; the thread, the batch and the card follow (Slack paces
            # posts per channel, so a burst of requests must not wait for them).
            self.ctx.tasks.spawn(self._open_soon(record), name=f"plane open {record.id}")
        if created:  # what it is now is what was just written: no read needed
            # No permalink: the card is posted after the 201 (`_open_soon`), never before it.
            reason = forbidden_reason(decision) if state == "forbidden" else None
            return Answer(record.id, state, digest, reason=reason), True
        # A repeat (a client retrying after a lost answer): by now the card may be up, so its
        # link is given, as GET gives it.
        answer = await self.answer(record.id)
        assert answer is not None
        return answer, False

    async def _allowance(
        self, ask: Ask, channel: str, decision: GateDecision
    ) -> AllowanceRow | None:
        """The channel's allowance covering the call, as the agent's gate finds one (none
        under a change freeze, or where the policy offers no "Allow for")."""
        ctx = self.ctx
        if ctx.policy.allow_window(ask.tool, channel, decision) is None:
            return None
        if await freeze_for(ctx, channel, ask.tool) is not None:
            return None
        for row in await ctx.store.active_allowances(channel_id=channel, now=ctx.clock()):
            shape = load_shape(row.shape)
            if row.tool == ask.tool and shape and covers(shape, ask.tool, ask.arguments, decision):
                return row
        return None

    async def _open(self, record: PlaneRequest) -> None:
        """The request's thread (a root message saying who asked), its session and its paused
        one-call batch; the card is posted in the background, as a run's are. A request cut
        short after its thread was posted keeps that thread."""
        store = self.ctx.store
        session = None if record.session_id is None else await store.get_session(record.session_id)
        if session is None:
            text = _root_text(record)
            posted = await self.ctx.output.post_root(
                record.channel_id, record.requester or "", text
            )
            if isinstance(posted, PostFailed):
                raise NotOpened(
                    f"request {record.id}: Slack refused its message in {record.channel_id}: "
                    f"{posted.error}"
                )
            session = await store.get_or_create_session(
                posted.team_id, posted.channel_id, posted.thread_ts
            )
            await store.plane_attach(record.id, session.id)  # before the batch: never resumed
            await checkpoint("plane_opening")  # a kill here: `reopen_cut` opens it later
        if record.requester:
            await store.set_requester(session.id, record.requester)
        call = ToolCall(id=call_id_of(record.id), name=record.tool, arguments=record.arguments)
        request = ToolApprovalRequest(
            call_id=call.id,
            name=call.name,
            arguments=call.display_arguments(),
            description="",
            digest=record.digest,
        )
        await store.record_pause(session.id, ChatMessage.assistant(None, (call,)), [request], [])
        thread = Thread.of(session)
        self.ctx.tasks.spawn(self._post_card(thread, session.id), name=f"plane card {record.id}")

    async def _open_soon(self, record: PlaneRequest) -> None:
        """Open a request just saved; a thread Slack refuses is tried again a few times, then
        left to `reopen_cut`."""
        for delay in (*OPEN_RETRY_DELAYS, None):
            try:
                async with self._opening:
                    await self._open(record)
                return
            except NotOpened as exc:
                logger.warning("%s", exc)
            if delay is None:
                return
            await asyncio.sleep(delay)

    async def reopen_cut(self) -> int:
        """Open the requests a process died opening (recorded, never given their batch): each
        once, by whichever replica claims it first. Returns how many."""
        store, reopened = self.ctx.store, 0
        for record in await store.plane_unopened(OPENING_GRACE):
            if await store.plane_claim_opening(record, OPENING_GRACE):
                try:
                    await self._open(record)
                except NotOpened as exc:
                    logger.warning("%s", exc)
                    continue
                reopened += 1
        return reopened

    async def keep_opening(self) -> None:
        """Every `OPENING_GRACE`, open what a dead process left (`reopen_cut`)."""
        while True:
            try:
                await self.reopen_cut()
            except Exception:
                logger.exception("reopening outside requests failed; trying again")
            await asyncio.sleep(OPENING_GRACE.total_seconds())

    async def _post_card(self, thread: Thread, session_id: str) -> None:
        # A kill here (after the 201, before the card): start-up posts it (`repost_missing`).
        await checkpoint("plane_card")
        await self.cards.post_all(thread, session_id)

    # -- answering ---------------------------------------------------------------------------

    async def answer(self, request_id: str, *, links: bool = True) -> Answer | None:
        """The request's state now; `links`: with its card's permalink (a Slack call)."""
        record = await self.ctx.store.plane_request(request_id)
        if record is None:
            return None
        if record.state != "pending":
            return self._settled_at_once(record)
        row = None
        if record.session_id is not None:
            row = await self.ctx.store.find_call(record.session_id, call_id_of(record.id))
        if row is None:
            return Answer(record.id, "pending", record.digest)
        permalink = None
        if links and row.card_channel and row.card_ts:
            permalink = await self.ctx.output.permalink(CardRef(row.card_channel, row.card_ts))
        state = _STATES[row.status]
        approvers = tuple(row.approvals) or ((row.decided_by,) if row.decided_by else ())
        decided_by = approvers if state == "approved" else _decider(row)
        receipt = None
        if state == "approved":
            decided = row.decided_at or self.ctx.clock()
            receipt = self._receipt(record, int(decided.timestamp()), approvers, row)
        reason = row.reason
        if state == "rejected" and row.status == "cancelled":
            reason = reason or "cancelled"
        return Answer(record.id, state, row.running_digest, permalink, decided_by, reason, receipt)

    def _settled_at_once(self, record: PlaneRequest) -> Answer:
        """Forbidden or allowed by the policy itself: no card, no person."""
        if record.state == "forbidden":
            decision = self._decision(record)
            return Answer(record.id, "forbidden", record.digest, reason=forbidden_reason(decision))
        receipt = self._receipt(record, int(record.created_at.timestamp()), (), None)
        return Answer(record.id, "allowed", record.digest, reason=record.rule, receipt=receipt)

    def _decision(self, record: PlaneRequest) -> GateDecision:
        call = ToolCall(id="plane", name=record.tool, arguments=record.arguments)
        return self.ctx.policy.decide(self.ctx.tools.get(record.tool) or record.tool, call)

    def _receipt(
        self,
        record: PlaneRequest,
        iat: int,
        approvers: tuple[str, ...],
        row: ToolCallRow | None,
    ) -> str:
        import json

        arguments = json.loads(row.edited_arguments or row.arguments) if row else None
        arguments = arguments if isinstance(arguments, dict) else json.loads(record.arguments)
        rule = record.rule
        if row is not None:
            decision = call_decision(self.ctx, row)
            rule = decision.policy_rule or decision.rule
        ttl = int(self.ctx.policy.plane.receipt_ttl.total_seconds())
        claims = Claims(
            jti=record.id,
            iat=iat,
            exp=iat + ttl,
            tool=record.tool,
            digest=row.running_digest if row is not None else record.digest,
            approvers=approvers,
            rule=rule,
            channel=record.channel_id,
            argv=argv_of(record.tool, arguments),
        )
        return sign(self.key, claims)

    async def wait(self, request_id: str, seconds: float) -> Answer | None:
        """The request's state once decided, or after `seconds` (a long poll)."""
        deadline = time.monotonic() + seconds
        while True:
            decided = self.ctx.outside.rung  # taken before reading: a decision in between wakes
            answer = await self.answer(request_id, links=False)
            if answer is None or answer.decided or time.monotonic() >= deadline:
                break
            left = min(POLL_INTERVAL, max(0.0, deadline - time.monotonic()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(decided.wait(), left)
        return await self.answer(request_id)


def _decider(row: ToolCallRow) -> tuple[str, ...]:
    return (row.decided_by,) if row.decided_by else ()


def _root_text(record: PlaneRequest) -> str:
    """The thread's root: who asked, what, why, and that OpsGate will not run it."""
    import json

    arguments = json.loads(record.arguments)
    what = (
        f"`{arguments.get('command')}`"
        if record.tool == "run_command" and isinstance(arguments, dict)
        else f"{record.tool} {record.arguments}"
    )
    why = f" Reason: {record.reason}" if record.reason else ""
    return (
        f"approval of {what} through {record.client} (outside OpsGate).{why} "
        f"OpsGate will not run it: {record.client} does, once approved."
    )
