"""The allowance notices in Slack's words (mrkdwn). Tool names and shape labels come from the
model's arguments, so they are untrusted: they reach mrkdwn only through `bot.slack._text`."""

from __future__ import annotations

from ..runs.notices import (
    AllowanceGranted,
    AllowanceList,
    AllowanceRevoked,
    AllowanceUsed,
    NothingRevoked,
)
from ..runs.views import AllowanceInfo
from ._card_body import slack_date
from ._text import code_span, escape_mrkdwn, user_mention

__all__ = ["allowance_line", "ux_text"]

UxNotice = AllowanceUsed | AllowanceGranted | AllowanceList | AllowanceRevoked | NothingRevoked


def allowance_line(allowance: AllowanceInfo) -> str:
    """One allowance in words: id, tool, shape, channel, who granted it, until when."""
    return (
        f"allowance `{allowance.id}`: {code_span(allowance.tool)} "
        f"{code_span(allowance.label, 200)} in <#{allowance.channel}>, granted by "
        f"{user_mention(allowance.granted_by)}, until {slack_date(allowance.expires_at)}"
    )


def ux_text(notice: UxNotice) -> str:
    match notice:
        case AllowanceUsed(tool=tool, allowance=allowance):
            return (
                f":unlock: {code_span(tool)} ran without a card under {allowance_line(allowance)}"
            )
        case AllowanceGranted(allowance=allowance):
            line = allowance_line(allowance)
            return f":unlock: New {line}. `/opsgate allowances` lists and revokes allowances."
        case AllowanceList(channel=channel, entries=entries):
            if not entries:
                return f"No allowances are active in <#{channel}>."
            return "\n".join(f"• {allowance_line(a)}" for a in entries)
        case AllowanceRevoked(allowance=allowance, by=by):
            return f"{user_mention(by)} revoked {allowance_line(allowance)}."
        case NothingRevoked(why=why):
            return f"Nothing revoked: {escape_mrkdwn(why)}."
