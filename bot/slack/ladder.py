"""The direct message an approver gets when a call waits for them: a reminder, or the news
that an escalation step added them (`bot.runs.ladder`)."""

from __future__ import annotations

import functools
from datetime import UTC, datetime

from ..runs.notices import AwaitsYou, OnCallNow
from ..store import Delegation
from ..words import format_duration
from .mrkdwn import escape_mrkdwn, slack_date, user_mention

__all__ = ["awaits_you_text", "delegation_lines", "oncall_text", "waited_text"]


@functools.lru_cache(maxsize=64)
def awaits_you_text(notice: AwaitsYou) -> str:
    """One line saying what waits, for how long, who asked, and a link to its card. Kept for
    the last few notices: a tick writes the same one to each of a call's approvers."""
    name = f"`{escape_mrkdwn(notice.call.tool)}`"
    card = f"<{notice.call.permalink}|the card>" if notice.call.permalink else "its card"
    asked = f" asked by {user_mention(notice.requested_by)}" if notice.requested_by else ""
    waited = format_duration(notice.waited, approximate=True)
    lead = (
        ":arrow_up: Nobody has decided yet, so this was escalated to you"
        if notice.why == "escalated"
        else ":alarm_clock: Reminder: this waits for your decision"
    )
    return (
        f"{lead}: {name}{asked}, waiting {waited}: {escape_mrkdwn(notice.summary)}. "
        f"Decide on {card}."
    )


def oncall_text(notice: OnCallNow) -> str:
    """`/opsgate who`: one line per on-call name of the policy."""
    if not notice.people:
        return "The policy names no on-call rotation (`[oncall.<name>]`)."
    lines = [
        f"• `oncall:{escape_mrkdwn(name)}`: "
        + (user_mention(who) if who else "nobody (no approval through this name)")
        for name, who in notice.people
    ]
    return ":telephone_receiver: On call now:\n" + "\n".join(lines)


def waited_text(asked_at: datetime) -> str:
    """How long ago a call began to wait, as each reader's Slack shows it ("12 minutes ago")."""
    moment = asked_at if asked_at.tzinfo is not None else asked_at.replace(tzinfo=UTC)
    fallback = moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{int(moment.timestamp())}^{{date_short_pretty}} {{time}} ({{ago}})|{fallback}>"


def delegation_lines(user: str, held: tuple[Delegation, ...]) -> str:
    """The Home tab's delegations of `user`: who decides for them, and for whom they decide."""
    lines = []
    for d in held:
        until = slack_date(d.until)
        if d.delegator == user:
            lines.append(f"• {user_mention(d.delegate)} decides for you until {until}")
        else:
            lines.append(f"• You decide for {user_mention(d.delegator)} until {until}")
    return "\n".join(lines)
