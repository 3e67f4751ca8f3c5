"""The approval plane's test setup: a policy with clients, a running bot, clicks on cards."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bot.slack.ids import ACTION_REASON, BLOCK_REASON, CALLBACK_REJECT
from tests.processes.test_durability import _approve_value
from tests.support.bot_process import SECRET, BotProcess, bot_process
from tests.support.llm_server import LLMStandIn
from tests.support.slack_api import SlackAPIStandIn
from tests.support.slack_requests import block_actions, interaction_body, sign, view_submission

__all__ = [
    "CI_TOKEN",
    "OTHER_TOKEN",
    "Cli",
    "Plane",
    "client_env",
    "opsgate",
    "plane_bot",
    "token_hash",
    "write_policy",
]

CI_TOKEN = "ci-token-0123456789"
OTHER_TOKEN = "other-token-0123456789"

POLICY = """
[defaults]
required_approvals = 1

[tools.run_command]
approval = "rules"
{allow_for}

[[tools.run_command.rules]]
prefix = ["rm", "-rf", "/"]
approval = "forbidden"
justification = "never"

[[tools.run_command.rules]]
prefix = ["deploy", "prod"]
approval = "always"
required_approvals = 2

[[tools.run_command.rules]]
prefix = ["uptime"]
approval = "never"

[plane]
channel = "C0OPS"
receipt_ttl = "{ttl}"

[plane.clients.ci]
token_sha256 = "{ci}"
channels = ["C0OPS"]
tools = ["run_command", "claude_code.Write"]
requester = "U0CI"

[plane.clients.other]
token_sha256 = "{other}"
channels = ["C0OTHER"]
"""


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _is_card(params: dict[str, object]) -> bool:
    return "opsgate_approve" in str(params.get("blocks"))


@dataclass
class Plane:
    bot: BotProcess
    slack: SlackAPIStandIn
    llm: LLMStandIn
    http: httpx.AsyncClient
    tmp_path: Path

    def headers(self, token: str = CI_TOKEN) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    async def post(self, body: Any, token: str = CI_TOKEN) -> httpx.Response:
        return await self.http.post(
            f"{self.bot.url}/v1/approvals", json=body, headers=self.headers(token)
        )

    async def get(self, request_id: str, wait: float = 0) -> dict[str, Any]:
        response = await self.http.get(
            f"{self.bot.url}/v1/approvals/{request_id}",
            params={"wait": wait},
            headers=self.headers(),
            timeout=wait + 10,
        )
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()
        return result

    async def card(self, index: int = 0) -> tuple[str, str]:
        """The ledger id and ts of the `index`-th card posted."""
        cards = await self.slack.wait_for(
            "chat.postMessage",
            where=lambda c: c.ok and _is_card(c.params),
            count=index + 1,
            timeout=30,
        )
        posted = cards[index]
        return _approve_value(posted.params), str(posted.response["ts"])

    async def click(self, action: str, ledger_id: str, card_ts: str, user: str) -> int:
        payload = block_actions(action, ledger_id, user=user, channel="C0OPS", message_ts=card_ts)
        body = interaction_body(payload)
        response = await self.http.post(
            f"{self.bot.url}/slack/events",
            content=body,
            headers={"Content-Type": "application/x-www-form-urlencoded", **sign(SECRET, body)},
        )
        return response.status_code

    async def reject(self, ledger_id: str, card_ts: str, user: str, reason: str) -> None:
        """Reject as a person does: the button, then the reason form."""
        assert await self.click("opsgate_reject", ledger_id, card_ts, user) == 200
        await self.slack.wait_for("views.open", timeout=30)
        values = {BLOCK_REASON: {ACTION_REASON: reason}}
        body = interaction_body(view_submission(CALLBACK_REJECT, ledger_id, values, user=user))
        response = await self.http.post(
            f"{self.bot.url}/slack/events",
            content=body,
            headers={"Content-Type": "application/x-www-form-urlencoded", **sign(SECRET, body)},
        )
        assert response.status_code == 200

    def cards(self) -> list[Any]:
        return [c for c in self.slack.calls_to("chat.postMessage") if c.ok and _is_card(c.params)]


def write_policy(
    tmp_path: Path, ttl: str = "15m", extra: str = "", allow_for: str | None = None
) -> Path:
    """The plane's test policy (clients `ci` and `other`), `extra` TOML appended."""
    policy = tmp_path / "policy.toml"
    allow = "" if allow_for is None else f'allow_for = "{allow_for}"'
    tokens = {"ci": token_hash(CI_TOKEN), "other": token_hash(OTHER_TOKEN)}
    text = POLICY.format(ttl=ttl, allow_for=allow, **tokens)
    policy.write_text(text + extra)
    return policy


@contextlib.asynccontextmanager
async def plane_bot(
    tmp_path: Path,
    *,
    ttl: str = "15m",
    extra: str = "",
    allow_for: str | None = None,
    **env: str,
) -> AsyncIterator[Plane]:
    policy = write_policy(tmp_path, ttl, extra, allow_for)
    async with (
        LLMStandIn() as llm,
        SlackAPIStandIn() as slack,
        httpx.AsyncClient(timeout=10) as http,
        bot_process(tmp_path, llm, slack, OPSGATE_POLICY=str(policy), **env) as bot,
    ):
        yield Plane(bot, slack, llm, http, tmp_path)


def loads(text: str) -> Any:
    return json.loads(text)


OPSGATE = Path(sys.executable).with_name("opsgate")
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Cli:
    """An `opsgate` command run as a child process."""

    process: asyncio.subprocess.Process

    async def result(self, timeout: float = 60, stdin: bytes | None = None) -> tuple[int, str, str]:
        out, err = await asyncio.wait_for(self.process.communicate(stdin), timeout)
        assert self.process.returncode is not None
        return self.process.returncode, out.decode(), err.decode()


def client_env(url: str | None, token: str = CI_TOKEN) -> dict[str, str]:
    """A client's environment: the repository's code, the bot's URL and the client token."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPSGATE_", "SLACK_"))}
    env |= {"PYTHONPATH": str(ROOT), "OPSGATE_CLIENT_TOKEN": token}
    if url is not None:
        env["OPSGATE_URL"] = url
    return env


async def opsgate(
    *args: str, url: str | None = None, token: str = CI_TOKEN, cwd: Path, stdin: bool = False
) -> Cli:
    env = client_env(url, token)
    process = await asyncio.create_subprocess_exec(
        str(OPSGATE),
        *args,
        env=env,
        cwd=cwd,
        stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    return Cli(process)
