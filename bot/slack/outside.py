"""What an outside request's card adds (`bot.plane`): who asked, why, and that OpsGate will not
run the command itself (the caller does, once approved)."""

from __future__ import annotations

from slack_sdk.models.blocks import Block, MarkdownTextObject, SectionBlock

from ..runs.views import CardCall
from .mrkdwn import escape_cut, requester_text

__all__ = ["outside_blocks"]

_REASON_MAX = 1500


def outside_blocks(call: CardCall) -> list[Block]:
    if call.outside is None:
        return []
    client = escape_cut(call.outside.client, 80)
    who = f" for {requester_text(call.requested_by)}" if call.requested_by else ""
    text = f":inbox_tray: Asked by *{client}* (outside automation){who}."
    if call.outside.reason:
        text += f"\n*Reason:* {escape_cut(call.outside.reason, _REASON_MAX)}"
    text += f"\nOpsGate will not run this itself: {client} runs it once approved."
    return [SectionBlock(text=MarkdownTextObject(text=text, verbatim=True))]
