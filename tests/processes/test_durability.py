"""Acknowledged means durable (docs/architecture.md), on a real `opsgate run --http`
child process that is stopped with SIGTERM or killed with SIGKILL and started again."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest
from aiohttp import web

from bot.store import SQLiteStore
from tests.support.bot_process import SECRET, BotProcess, bot_process
from tests.support.harness import text_sse
from tests.support.llm_server import LLMStandIn
from tests.support.postgres import postgres_cluster, postgres_url
from tests.support.slack_api import SlackAPIStandIn
from tests.support.slack_requests import block_actions, interaction_body, sign, slash_command

__all__ = ["postgres_cluster", "postgres_url"]  # the fixtures the PostgreSQL case uses


def _user_texts(llm: LLMStandIn) -> list[str]:
    out = []
    for body in llm.requests:
        users = [m for m in body["messages"] if m["role"] == "user"]
        out.append(str(users[-1]["content"]) if users else "")
    return out


MENTION = "1700000001.000100"


async def _killed_at_inbox(
    tmp_path: Path,
    llm: LLMStandIn,
    slack: SlackAPIStandIn,
    send: Callable[[BotProcess], Awaitable[int]],
) -> None:
    """A bot that answers `send`'s request 200 and is killed -9 before its inbox processes it."""
    async with bot_process(tmp_path, llm, slack, OPSGATE_FAULT_HOLD="inbox") as bot:
        assert await send(bot) == 200
        await bot.wait_for_line("holding at inbox")
        assert await bot.stop(signal.SIGKILL) == -signal.SIGKILL
    assert llm.requests == []  # nothing was processed before the kill


async def test_a_mention_killed_right_after_its_200_is_answered_after_restart(
    tmp_path: Path,
) -> None:
    async with (
        LLMStandIn() as llm,
        SlackAPIStandIn() as slack,
        httpx.AsyncClient(timeout=10) as http,
    ):
        llm.reply_text("Looked into it.")
        await _killed_at_inbox(
            tmp_path, llm, slack, lambda bot: bot.mention(http, "check the api", ts=MENTION)
        )
        # Saved once before the 200: the mention's own row (the intake's one commit).
        assert await _inbox_rows(tmp_path) == [("message", "received")]
        async with bot_process(tmp_path, llm, slack) as bot:
            await llm.wait_for_requests(1, timeout=30)
            await slack.wait_until_ended({MENTION}, "Looked into it.")
            # Slack's retry of the delivery that was acknowledged: seen before, nothing again.
            assert await bot.mention(http, "check the api", ts=MENTION) == 200
            assert await bot.stop(signal.SIGTERM) == 0
        async with bot_process(tmp_path, llm, slack) as bot:  # and nothing at the next start
            assert await bot.stop(signal.SIGTERM) == 0
        assert _user_texts(llm) == ["check the api"]
        assert await _inbox_rows(tmp_path) == [("message", "done")]


async def _inbox_rows(tmp_path: Path) -> list[tuple[str, str]]:
    """(kind, state) of every inbox row but the start-ups' own (none are `request` rows here)."""
    async with SQLiteStore(tmp_path / "opsgate.db") as store:
        db = store._db
        async with db.reading("inbox rows") as tx:
            rows = await tx.fetch_all("SELECT kind, state FROM inbox ORDER BY id")
    return [(str(row[0]), str(row[1])) for row in rows]


async def test_sigterm_after_a_burst_loses_no_acknowledged_mention(tmp_path: Path) -> None:
    count = 20
    timestamps = {f"17000001{n:02d}.000100" for n in range(count)}
    async with (
        LLMStandIn() as llm,
        SlackAPIStandIn() as slack,
        httpx.AsyncClient(timeout=30) as http,
    ):
        for _ in range(count):
            llm.reply_text("Looked into it.")
        async with bot_process(tmp_path, llm, slack) as bot:
            statuses = await asyncio.gather(
                *(bot.mention(http, f"request {ts}", ts=ts) for ts in sorted(timestamps))
            )
            assert statuses == [200] * count
            assert await bot.stop(signal.SIGTERM) == 0
        async with bot_process(tmp_path, llm, slack) as bot:
            await llm.wait_for_requests(count, timeout=60)
            await slack.wait_until_ended(timestamps, "Looked into it.")
            assert await bot.stop(signal.SIGTERM) == 0
    assert sorted(_user_texts(llm)) == sorted(f"request {ts}" for ts in timestamps)


@pytest.mark.parametrize("point", ["resume_claimed", "resume_started"])
async def test_an_approved_call_cut_off_before_it_began_runs_once_after_restart(
    tmp_path: Path, point: str
) -> None:
    marker = tmp_path / "ran.txt"
    async with (
        LLMStandIn() as llm,
        SlackAPIStandIn() as slack,
        httpx.AsyncClient(timeout=10) as http,
    ):
        llm.reply_tool_calls(
            [("call_1", "run_command", {"command": f"echo ran >> {marker}"})], "Restarting."
        )
        llm.reply_text("Done.")
        async with bot_process(tmp_path, llm, slack, OPSGATE_FAULT_HOLD=point) as bot:
            assert await bot.mention(http, "touch the marker", ts="1700000002.000100") == 200
            [card] = await slack.wait_for(
                "chat.postMessage", where=lambda c: "opsgate_approve" in str(c.params), timeout=30
            )
            ledger_id = _approve_value(card.params)
            card_ts = str(card.response["ts"])
            payload = block_actions(
                "opsgate_approve",
                ledger_id,
                user="U0BOB",
                channel="C0OPS",
                message_ts=card_ts,
            )
            body = interaction_body(payload)
            response = await http.post(
                f"{bot.url}/slack/events",
                content=body,
                headers={
                    "Content-Type": "application/x-www-form-urlencoded",
                    **sign(SECRET, body),
                },
            )
            assert response.status_code == 200
            await bot.wait_for_line(f"holding at {point}")
            assert await bot.stop(signal.SIGKILL) == -signal.SIGKILL
        assert not marker.exists()
        for _ in range(2):  # the second start-up must not run it again
            async with bot_process(tmp_path, llm, slack) as bot:
                await llm.wait_for_requests(2, timeout=30)
                # The resumed run shows progress on its card.
                await slack.wait_until_ended({card_ts}, "Done.")
                assert await bot.stop(signal.SIGTERM) == 0
    assert marker.read_text() == "ran\n"
    assert len(llm.requests) == 2
    async with SQLiteStore(tmp_path / "opsgate.db") as store:
        events = [r.event for r in await store.audit_rows()]
    assert events.count("execution_start") == 1 and "resume_reclaimed" in events


def _approve_value(params: dict[str, object]) -> str:
    import json

    blocks = params["blocks"]
    if isinstance(blocks, str):
        blocks = json.loads(blocks)
    assert isinstance(blocks, list)
    for block in blocks:
        for element in block.get("elements", []) if block.get("type") == "actions" else []:
            if element.get("action_id") == "opsgate_approve":
                return str(element["value"])
    raise AssertionError("no Approve button on the card")


async def test_a_shortcut_killed_right_after_its_200_is_answered_after_restart(
    tmp_path: Path,
) -> None:
    """The one intake saved it before the 200: the next start hands it back to the app."""
    from tests.scenarios.test_edits_and_allowances import _message_action

    message = {"type": "message", "user": "U0ALICE", "ts": "1700000050.000200", "text": "disk?"}
    body = interaction_body(_message_action("U0CAROL", message))
    async with (
        LLMStandIn() as llm,
        SlackAPIStandIn() as slack,
        httpx.AsyncClient(timeout=10) as http,
    ):
        llm.reply_text("Looked into it.")
        async with bot_process(tmp_path, llm, slack, OPSGATE_FAULT_HOLD="shortcut") as bot:
            response = await http.post(
                f"{bot.url}/slack/events",
                content=body,
                headers={
                    "Content-Type": "application/x-www-form-urlencoded",
                    **sign(SECRET, body),
                },
            )
            assert response.status_code == 200
            await bot.wait_for_line("holding at shortcut")
            assert await bot.stop(signal.SIGKILL) == -signal.SIGKILL
        assert llm.requests == []  # nothing was acted on before the kill
        async with bot_process(tmp_path, llm, slack) as bot:
            await llm.wait_for_requests(1, timeout=30)
            await slack.wait_until_ended({"1700000050.000200"}, "Looked into it.")
            assert await bot.stop(signal.SIGTERM) == 0
        assert _user_texts(llm) == ["disk?"]


async def test_an_opsgate_request_killed_right_after_its_200_is_answered_after_restart(
    tmp_path: Path,
) -> None:
    """Saved by the one intake as its `slash` row before the 200: the next start runs it."""
    body = slash_command(
        "check the api", user="U0ALICE", channel="C0OPS", trigger_id="61.T0TEST.opsgate"
    )
    headers = {"Content-Type": "application/x-www-form-urlencoded", **sign(SECRET, body)}
    async with (
        LLMStandIn() as llm,
        SlackAPIStandIn() as slack,
        httpx.AsyncClient(timeout=10) as http,
    ):
        llm.reply_text("Looked into it.")

        async def command(bot: BotProcess) -> int:
            response = await http.post(f"{bot.url}/slack/events", content=body, headers=headers)
            return response.status_code

        await _killed_at_inbox(tmp_path, llm, slack, command)
        assert await _inbox_rows(tmp_path) == [("slash", "received")]  # one row, one commit
        async with bot_process(tmp_path, llm, slack) as bot:
            await llm.wait_for_requests(1, timeout=30)
            await slack.wait_until(
                lambda: any("Looked into it." in str(m.get("text")) for m in slack.messages),
                timeout=60,
            )
            # Slack's replay of the signed request within its window: seen before.
            again = await http.post(f"{bot.url}/slack/events", content=body, headers=headers)
            assert again.status_code == 200
            assert await bot.stop(signal.SIGTERM) == 0
        assert _user_texts(llm) == ["check the api"]
        assert await _inbox_rows(tmp_path) == [("slash", "done")]


class _HeldModel:
    """Model replies held while `holding`: each request waits (in flight, as the bot sees it)
    until `let_go`, then answers "Answer to <its question>"; `asked` lists each request's last
    user message as it arrived."""

    def __init__(self, llm: LLMStandIn, replies: int) -> None:
        self.asked: list[str] = []
        self.users: list[int] = []
        """How many user messages each request carried."""
        self._go = asyncio.Event()
        self._changed = asyncio.Condition()
        for _ in range(replies):
            llm.reply_with(self._reply)

    async def _reply(self, body: dict[str, object]) -> web.StreamResponse:
        messages = body["messages"]
        assert isinstance(messages, list)
        users = [str(m["content"]) for m in messages if m["role"] == "user"]
        async with self._changed:
            self.asked.append(users[-1])
            self.users.append(len(users))
            self._changed.notify_all()
        await self._go.wait()
        answer = f"Answer to {users[-1].split()[0]}."
        return web.Response(body=text_sse(answer), content_type="text/event-stream")

    async def wait_asked(self, question: str, timeout: float = 60) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: question in self.asked), timeout)

    def let_go(self) -> None:
        self._go.set()


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "opsgate.db")
    url: str = request.getfixturevalue("postgres_url")
    return url


@pytest.mark.timeout(300)
async def test_mentions_killed_with_their_model_request_in_flight_are_each_answered_once(
    tmp_path: Path, database: str
) -> None:
    """Five mentions, each acknowledged and its model request in flight when the bot is
    killed -9 (earlier ones, asked again at each start, are cut again): after the last
    restart every one is answered, once, from its stored message; none is only told of the
    restart."""
    count = 5
    env = {"OPSGATE_DB": database, "OPSGATE_LEASE_SECONDS": "2", "OPSGATE_HEARTBEAT_SECONDS": "1"}
    asks = {f"m{k}": f"1700000{k}00.000100" for k in range(count)}
    async with (
        LLMStandIn() as llm,
        SlackAPIStandIn() as slack,
        httpx.AsyncClient(timeout=10) as http,
    ):
        model = _HeldModel(llm, replies=count * (count + 3))
        for k, (ask, ts) in enumerate(asks.items()):
            async with bot_process(tmp_path, llm, slack, **env) as bot:
                question = f"{ask} how full is the disk on db-{k}?"
                assert await bot.mention(http, question, ts=ts, channel=f"C0DB{k}") == 200
                await model.wait_asked(question)
                assert await bot.stop(signal.SIGKILL) == -signal.SIGKILL
        model.let_go()

        def answers(ask: str) -> int:
            return sum(f"Answer to {ask}." in str(m.get("text")) for m in slack.messages)

        async with bot_process(tmp_path, llm, slack, **env) as bot:
            try:
                await slack.wait_until(lambda: all(answers(a) for a in asks), timeout=120)
            except TimeoutError:
                unanswered = [a for a in asks if not answers(a)]
                said = [str(c.params.get("text"))[:120] for c in slack.calls_to("chat.postMessage")]
                raise AssertionError(
                    f"unanswered: {unanswered}; posted: {said}; bot: {bot.lines[-40:]}"
                ) from None
            await slack.wait_until_ended(set(asks.values()), "Answer to m", timeout=60)
            assert await bot.stop(signal.SIGTERM) == 0
    assert {ask: answers(ask) for ask in asks} == dict.fromkeys(asks, 1)
    told = [str(c.params.get("text")) for c in slack.calls_to("chat.postMessage")]
    assert not [t for t in told if "restarted during this run" in t]
    assert set(model.users) == {1}  # each request carried its one message, never added again
