"""The mrkdwn of the longer private answers: `/opsgate pending`, `/opsgate help`, and who may
decide (the words for an approvals refusal)."""

from __future__ import annotations

from collections.abc import Sequence

from ..approvals import Refused, Who
from ..runs.views import ChannelHelp, PendingEntry
from ..store import CancelReason, DecisionReason
from ..words import count
from .cards import approvers_text, slack_date
from .freezes import freeze_lines
from .mrkdwn import code_span, escape_mrkdwn, requester_text, user_mention

__all__ = [
    "approvers_text",
    "cancel_reason_text",
    "decision_reason_text",
    "help_text",
    "pending_text",
    "refusal_text",
]


_PENDING_SHOWN_MAX = 20
_UNKNOWN_WORKSPACE = (
    "Slack did not say which workspace you belong to, so I cannot check that you may do this "
    "here. Nothing was changed."
)


def refusal_text(refusal: Refused) -> str:
    """Why the person may not do what they tried, and who may."""
    who = refusal.who
    if refusal.action in ("cancel", "withdraw"):
        return _cancel_refusal(refusal, who)
    match refusal.reason:
        case "unknown_workspace":
            return _UNKNOWN_WORKSPACE
        case "card_locked":
            return (
                "Its arguments could not be shown whole, so it cannot be approved, edited or "
                "allowed. Reject it, or ask again with shorter arguments."
            )
        case "frozen":
            return (
                f"Nothing may be approved, edited or allowed now: {escape_mrkdwn(refusal.rule)} "
                "is in force (where the policy allows it, a break-glass approver may break glass)."
            )
        case "not_breakable":
            return f"Glass cannot be broken here: {escape_mrkdwn(refusal.rule)}."
        case "own_break_glass":
            return "You broke glass on this call, so someone else must review it."
        case "self_approval":
            return (
                "You asked for this, so you cannot approve it yourself: someone else has to. "
                "To allow it, set allow_self_approval = true in the policy file."
            )
        case "other_workspace":
            return (
                "Only members of this workspace may decide here. To let people from another "
                "organisation approve, list them in the policy's approvers."
            )
        case _ if refusal.action == "break_glass":
            if who.anyone:
                return "Nobody may break glass here: the policy lists no break_glass_approvers."
            return (
                f"Only {approvers_text(who.users, who.groups)} may break glass on this call "
                "(defaults.break_glass_approvers, or the rule's approvers)."
            )
        case _:
            text = f"Only {approvers_text(who.users, who.groups)} may approve this."
            if refusal.unresolved_groups:
                failed = ", ".join(f"<!subteam^{g}>" for g in refusal.unresolved_groups)
                text += f" (The members of {failed} could not be looked up just now; try again.)"
            return text


def _cancel_refusal(refusal: Refused, who: Who) -> str:
    if refusal.reason == "unknown_workspace":
        return _UNKNOWN_WORKSPACE
    if refusal.reason == "other_workspace":
        return (
            "Only members of this workspace may cancel here (or the requester). To let people "
            "from another organisation cancel, list them in the policy's approvers."
        )
    asked = requester_text(who.requester) if who.requester else "the requester"
    text = f"Only {asked} or {approvers_text(who.users, who.groups)} may cancel this run."
    if refusal.reason == "groups_unavailable":
        text += " (The approvers' user groups could not be looked up just now; try again.)"
    return text


def decision_reason_text(why: DecisionReason) -> str:
    """Why a click changed nothing: who decided first and when, or what else."""
    match why.kind:
        case "already_decided":
            verb = why.status if why.status in ("rejected", "cancelled") else "approved"
            who = " and ".join(user_mention(u) for u in why.by)
            by = f" by {who}" if who else ""
            at = f" {slack_date(why.at)}" if why.at is not None else ""
            return f"This request was already {verb}{by}{at}."
        case "expired":
            within = f" (no decision within {escape_mrkdwn(why.ttl)})" if why.ttl else ""
            at = f" {slack_date(why.at)}" if why.at is not None else ""
            return f"This request expired{at}{within}; it was not run."
        case "needs_no_approval":
            return "This call needs no approval; it runs once the batch is decided."
        case "already_approved_by_you":
            return "You already approved this request; it needs someone else's approval too."
        case "more_approvals_needed" if why.missing:
            still = "; ".join(
                f"{s.needed - s.have} more toward {code_span(s.label, 160)}" for s in why.missing
            )
            return f"Your approval counts; every rule must approve, still needed: {still}."
        case "more_approvals_needed":
            missing = why.required - why.approvals
            return f"{why.approvals} of {why.required} approvals; waiting for {missing} more."
        case "edit_not_allowed":
            return f"The policy does not allow editing `{escape_mrkdwn(why.tool)}` calls."
        case "self_allow":
            return "You asked for this call, so you cannot allow it."
        case "no_allowance_offered":
            return f"The policy offers no allowance for `{escape_mrkdwn(why.tool)}` here."
        case "arguments_changed":
            return (
                "Nothing recorded: the arguments changed since this card was drawn "
                f"(it showed digest `{escape_mrkdwn(why.shown)}`, the call is now "
                f"`{escape_mrkdwn(why.now)}`). The card is redrawn; check it and decide again."
            )
        case "preview_changed":
            return (
                "Nothing recorded: the preview changed: look again. The card shows the new "
                "preview; the approvals given on the old one were reset."
            )


def cancel_reason_text(why: CancelReason) -> str:
    """Why a cancel ended nothing."""
    match why.kind:
        case "batch_moved_on":
            return "Nothing was cancelled: this card belongs to an earlier request in the thread."
        case "not_waiting":
            return (
                "Nothing was cancelled: the run is no longer waiting for approval "
                f"(it is {why.state.replace('_', ' ')})."
            )


def pending_text(entries: Sequence[PendingEntry]) -> str:
    """The answer to `/opsgate pending`: each approval with a link to its card."""
    if not entries:
        return "Nothing is waiting for your approval right now."
    lines = [f"*Waiting for your decision ({len(entries)}):*"]
    for entry in entries[:_PENDING_SHOWN_MAX]:
        card = f"<{entry.permalink}|open the card>" if entry.permalink else "card not found"
        line = f"• {code_span(entry.tool, 60)} in <#{entry.channel}> · {card}"
        if entry.requested_by:
            line += f" · asked by {requester_text(entry.requested_by)}"
        if entry.required_approvals > 1:
            line += f" · {entry.approvals} of {entry.required_approvals} approvals"
        if entry.expires_at is not None:
            line += f" · expires {slack_date(entry.expires_at)}"
        lines.append(line)
    if len(entries) > _PENDING_SHOWN_MAX:
        lines.append(f"• … and {len(entries) - _PENDING_SHOWN_MAX} more")
    return "\n".join(lines)


_USAGE = (
    "*OpsGate* works on ops requests with tools; anything risky waits for a human's approval.",
    "• `/opsgate <request>`: start a run here (your request becomes a new thread)",
    "• `/opsgate pending`: approvals waiting for your decision, with links to their cards",
    "• `/opsgate help`: this help",
    "• `/opsgate freeze <duration> <reason>`, `/opsgate unfreeze`: start or end a change "
    "freeze of this channel (freeze admins only)",
    "• Mention me in a channel, or write to me in a DM; reply in the thread to go on",
    "• Write `cancel` in a thread waiting for approval (or click *Cancel run* on a card) "
    "to end the run without running anything: the requester or an approver may",
)


def help_text(info: ChannelHelp) -> str:
    """`/opsgate help`: usage and the channel's policy, in one screen of mrkdwn."""
    here = f"<#{info.channel}>"
    if not info.acts_here:
        return "\n".join(
            [*_USAGE, "", f"*In {here}*: I don't act here; `defaults.channels` does not list it."]
        )
    if info.trigger == "every_message":
        trigger = "every new message starts a run in its thread"
    else:
        trigger = "a mention of me starts a run"
    if info.allowed_bots:
        trigger += "; messages from " + ", ".join(code_span(b, 30) for b in info.allowed_bots)
        trigger += " may too"
    self_approval = "may" if info.allow_self_approval else "may not"
    if info.tools:
        tools = ", ".join(
            f"{code_span(name, 40)} ({escape_mrkdwn(how)})" for name, how in info.tools
        )
    else:
        tools = "none"
    approvers = approvers_text(info.approver_users, info.approver_groups)
    policy = [
        "",
        f"*In {here}:*",
        f"• Trigger: {trigger}",
        f"• Approvers: {approvers}; {count(info.required_approvals, 'approval')} needed; "
        f"the requester {self_approval} approve their own request",
        f"• Decisions expire after {escape_mrkdwn(info.ttl)}",
        f"• Tools: {tools}",
        f"• Up to {count(info.concurrency, 'run')} at once; more are queued",
    ]
    if info.has_instructions:
        policy.append("• This channel has its own instructions for me")
    if info.freezes:
        policy.append("• *Change freezes in force* (no Approve until they end):")
        policy += [f"  {line}" for line in freeze_lines(info.freezes)]
    policy.append(f"_Policy: {escape_mrkdwn(info.policy_source)}_")
    return "\n".join([*_USAGE, *policy])
