"""`opsgate check`'s warnings about the policy's names, against the Slack Web API and LLM
stand-ins over loopback HTTP: a rule's program on no PATH, approvers Slack does not know, a
channel the bot is not in. Warnings leave the exit status as it was."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from bot.cli.check import run_check
from tests.processes.test_cli import settings_for
from tests.support.llm_server import LLMStandIn
from tests.support.slack_api import SlackAPIStandIn

POLICY = """
[defaults]
approvers = ["U0KNOWN", "S0GONE"]
channels = ["C0OPS", "C0ELSEWHERE"]

[channels_policy.C0OPS]
approvers = ["U0LEFT"]

[tools.run_command]
approval = "rules"

[[tools.run_command.rules]]
prefix = ["ls"]
approval = "never"

[[tools.run_command.rules]]
prefix = ["kubectl-not-installed-here", "delete"]
"""


async def test_unknown_names_are_warned_about_and_the_check_still_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    policy = tmp_path / "opsgate.toml"
    policy.write_text(POLICY)
    async with LLMStandIn() as llm, SlackAPIStandIn() as slack:
        slack.set_user("U0LEFT", deleted=True)
        slack.set_usergroup_members("S0OTHER", ["U0KNOWN"])
        slack.set_channel("C0ELSEWHERE", is_member=False)
        settings = settings_for(tmp_path, llm.base_url, slack.url).model_copy(
            update={"opsgate_policy": policy}
        )
        out = io.StringIO()
        assert await run_check(out=out, settings=settings) == 0
    warnings = [line for line in out.getvalue().splitlines() if line.startswith("warn policy")]
    assert warnings == [
        "warn policy: tools.run_command.rules[1] names the program "
        "'kubectl-not-installed-here', which is on no PATH the tools use: the rule matches "
        "nothing that can run here",
        "warn policy: defaults.approvers: 'S0GONE' is no user group Slack knows "
        "(no_such_subteam): nobody can approve as it",
        "warn policy: channels_policy.C0OPS.approvers: 'U0LEFT' is a deactivated user: "
        "nobody can approve as it",
        "warn policy: defaults.channels: channel 'C0ELSEWHERE' is one the bot is not in: "
        "invite it (`/invite @OpsGate`)",
    ]
