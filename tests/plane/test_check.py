"""`opsgate check` says whether the approval plane is on, and for which clients."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from bot.cli.check import run_check
from tests.plane.support import CI_TOKEN, token_hash
from tests.processes.test_cli import settings_for
from tests.support.llm_server import LLMStandIn
from tests.support.slack_api import SlackAPIStandIn

pytestmark = pytest.mark.processes


@pytest.mark.parametrize("clients", [False, True])
async def test_check_says_whether_the_plane_is_on(tmp_path: Path, clients: bool) -> None:
    policy = tmp_path / "opsgate.toml"
    text = '[plane]\nchannel = "C0OPS"\n'
    if clients:
        text += f'\n[plane.clients.ci]\ntoken_sha256 = "{token_hash(CI_TOKEN)}"\n'
    policy.write_text(text, encoding="utf-8")
    async with LLMStandIn() as llm, SlackAPIStandIn(token="xoxb-test-token") as slack:
        settings = settings_for(tmp_path, llm.base_url, slack.url).model_copy(
            update={"opsgate_policy": policy}
        )
        out = io.StringIO()
        assert await run_check(out=out, settings=settings) == 0, out.getvalue()
    [line] = [line for line in out.getvalue().splitlines() if "approval plane" in line]
    if clients:
        assert line == "note approval plane: on for ci (POST /v1/approvals)"
    else:
        assert line.startswith("note approval plane: off")
