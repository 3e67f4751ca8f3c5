"""The run service's notices in Slack's words: untrusted text stays inert, long tool output is
attached whole, and refusals name who may act."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from agent_core.messages import Rejected
from bot.approvals import Refused, Who
from bot.runs.notices import (
    AwaitingDecision,
    CallLink,
    CardNotPosted,
    NotAllowed,
    Notice,
    Queued,
    Recovered,
    Reminder,
    RootPostFailed,
    RunCrashed,
    RunFailed,
    RunRefused,
    ToolNotRun,
    ToolRan,
)
from bot.slack.notices import OUTPUT_INLINE, render

HOSTILE = "<!channel> & <https://evil|click>"


@pytest.mark.parametrize(
    "notice",
    [
        RunFailed(HOSTILE),
        RunRefused(HOSTILE),
        RunCrashed(HOSTILE),
        RootPostFailed(HOSTILE),
        CardNotPosted(HOSTILE, HOSTILE),
        Recovered((HOSTILE,)),
        ToolRan(HOSTILE, "call_1", HOSTILE),
        ToolRan("shell", "call_1", HOSTILE + "\n" + HOSTILE),
        ToolNotRun(HOSTILE, Rejected(reason=HOSTILE)),
        AwaitingDecision((CallLink(HOSTILE, None),)),
        Reminder((CallLink(HOSTILE, None),), datetime(2025, 3, 1, 9, 30, tzinfo=UTC)),
    ],
    ids=lambda notice: notice.kind,
)
def test_untrusted_text_in_a_notice_reaches_slack_escaped(notice: Notice) -> None:
    text = render(notice).text
    assert "<!channel>" not in text and "<https://evil" not in text
    assert "&lt;!channel&gt;" in text


def test_tool_output_too_long_to_show_is_attached_whole() -> None:
    content = "line\n" * 1000
    rendered = render(ToolRan("shell", "call_7", content))
    assert len(rendered.text) <= OUTPUT_INLINE + 40
    assert rendered.attachment is not None
    assert rendered.attachment.filename == "shell-call_7.txt"
    assert rendered.attachment.content == content


def test_short_tool_output_is_one_line_without_attachment() -> None:
    rendered = render(ToolRan("shell", "call_7", "ok"))
    assert rendered.text == ":white_check_mark: `shell`: ok"
    assert rendered.attachment is None


def test_refusals_say_who_may_act() -> None:
    approve = NotAllowed(Refused("not_an_approver", "approve", "rule", Who(("U1",), ("S1",))))
    assert render(approve).text == "Only <@U1> or members of <!subteam^S1> may approve this."
    unavailable = NotAllowed(
        Refused("groups_unavailable", "approve", "rule", Who((), ("S1",)), ("S1",))
    )
    assert "could not be looked up" in render(unavailable).text
    cancel = NotAllowed(Refused("not_an_approver", "cancel", "rule", Who(("U1",), (), "U0REQ")))
    assert render(cancel).text == "Only <@U0REQ> or <@U1> may cancel this run."
    self_approval = NotAllowed(Refused("self_approval", "approve", "rule"))
    assert "cannot approve it yourself" in render(self_approval).text
    guest = NotAllowed(Refused("other_workspace", "approve", "rule"))
    assert "Only members of this workspace" in render(guest).text


def test_the_rejecter_is_a_mention_and_the_reason_stays_escaped() -> None:
    text = render(ToolNotRun("shell", Rejected(reason=HOSTILE, by="<@U0BOB>"))).text
    assert "rejected by <@U0BOB>" in text and "&lt;@U0BOB&gt;" not in text
    assert "<!channel>" not in text and "&lt;!channel&gt;" in text
    # Only a well-formed mention is kept as markup.
    forged = render(ToolNotRun("shell", Rejected(reason="no", by="<!channel>"))).text
    assert "<!channel>" not in forged


@pytest.mark.parametrize(
    ("limit", "words"), [(1, "1 run is already going"), (2, "2 runs are already going")]
)
def test_counts_are_in_words(limit: int, words: str) -> None:
    assert words in render(Queued(limit, 0)).text
