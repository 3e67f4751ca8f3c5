"""Notices and cards as plain text: the terminal's rendering (and a readable reference for
other front ends). No markup, so nothing needs escaping."""

from __future__ import annotations

import json

from agent_core.messages import render_outcome

from ..approvals import Refused
from ..runs.notices import Notice, stopped_text
from ..runs.timeline import Task
from ..runs.views import CardCall, CardOutcome, ChannelHelp, PendingEntry
from ..store import CancelReason, DecisionReason
from ..words import count, count_verb

__all__ = [
    "card_text",
    "notice_text",
    "plan_text",
    "refusal_text",
    "task_text",
]


_FINISH = {
    "length": "(The answer was cut off: the model hit its length limit.)",
    "content_filter": "(The provider's content filter stopped the answer.)",
    "max_rounds": "(I stopped after the maximum number of tool rounds.)",
}


def notice_text(notice: Notice) -> str:
    """One line (or a few) of plain text for `notice`."""
    text = _intake_text(notice) or _run_text(notice) or _decision_text(notice) or _ux_text(notice)
    assert text is not None, f"no plain text for notice {notice.kind!r}"
    return text


def _intake_text(notice: Notice) -> str | None:
    match notice.kind:
        case "channel_not_allowed":
            return "Sorry, I'm not set up to act here (see `channels` in the policy file)."
        case "queued":
            ahead = f", and {notice.ahead} more wait ahead of this one" if notice.ahead else ""
            return f"Queued: {count_verb(notice.limit, 'run', 'is', 'are')} already going{ahead}."
        case "awaiting_decision":
            names = ", ".join(c.tool for c in notice.calls) or "the request above"
            return f"Waiting for a decision on {names}; nothing new was started."
        case "earlier_queued":
            return "An earlier message is still queued; send this one again once it is answered."
        case "still_working":
            return "Still working on the previous request; this one is next."
        case "root_post_failed":
            return f"Could not post the request ({notice.error})."
        case "not_saved":
            return f"Could not save your {notice.what}: the database refuses writes. Try again."
    return None


def _run_text(notice: Notice) -> str | None:
    match notice.kind:
        case "run_failed":
            return f"[error] {notice.error or 'the model request failed'}"
        case "run_refused":
            return f"[refused] {notice.message}"
        case "run_crashed":
            return f"[crashed] Something went wrong inside OpsGate ({notice.error_type})."
        case "finish_note":
            return _FINISH[notice.reason]
        case "tool_ran":
            return f"[{'✗' if notice.is_error else '✓'} {notice.tool}] {notice.content}"
        case "tool_not_run":
            return f"[✗ {notice.tool}] did not run: {render_outcome(notice.outcome)}"
        case "card_not_posted":
            return f"Could not show the approval request for {notice.tool} ({notice.error})."
        case "reminder":
            when = f"{notice.expires_at:%H:%M} UTC"
            names = ", ".join(call.tool for call in notice.calls)
            waits = "still waits" if len(notice.calls) == 1 else "still wait"
            return f"{names} {waits} for a decision; expiring at {when}."
        case "run_stopped":
            return stopped_text(notice)
        case "recovered":
            if notice.interrupted:
                return f"OpsGate restarted while {', '.join(notice.interrupted)} was running."
            return "OpsGate restarted during this run. Send a message to continue."
    return None


def _decision_text(notice: Notice) -> str | None:
    match notice.kind:
        case "run_cancelled":
            return f"Run cancelled by {notice.by}. Nothing of the request was run."
        case "cancelled_before_start":
            return f"Cancelled by {notice.by} before it started."
        case "nothing_to_cancel":
            return "There is nothing to cancel here."
        case "nothing_cancelled":
            return f"Nothing was cancelled: {_cancel_reason(notice.why)}."
        case "not_allowed":
            return refusal_text(notice.refusal)
        case "unknown_request":
            return "I don't know this approval request."
        case "decision_not_recorded":
            return f"Nothing changed: {_decision_reason(notice.why)}."
        case "not_approvable":
            return "This call cannot be approved: its full arguments could not be shown."
        case "not_editable":
            return f"{notice.field} is too long ({notice.length} characters) to edit here."
        case "edit_awaits_preview":
            return "Edit saved; the edited call has a preview of its own: approve it on its card."
        case "pending_list":
            return _pending(notice.entries)
        case "help":
            return _help(notice.info)
    return None


def _ux_text(notice: Notice) -> str | None:
    match notice.kind:
        case "allowance_used":
            a = notice.allowance
            return (
                f"{notice.tool} ran without approval under allowance {a.id} ({a.label}), "
                f"granted by {a.granted_by}"
            )
        case "allowance_granted":
            a = notice.allowance
            return f"New allowance {a.id}: {a.tool} {a.label} until {a.expires_at:%H:%M} UTC"
        case "allowance_list":
            lines = [f"- {a.id}: {a.tool} {a.label} (by {a.granted_by})" for a in notice.entries]
            return "\n".join(lines) or "No allowances are active."
        case "allowance_revoked":
            return f"{notice.by} revoked allowance {notice.allowance.id}"
        case "nothing_revoked":
            return f"Nothing revoked: {notice.why}."
        case "freeze_announced":
            state = "started" if notice.started else "ended"
            until = f"{notice.until:%Y-%m-%d %H:%M} UTC"
            return f"Change freeze {notice.label} {state} (until {until})"
        case "break_glass_used":
            return (
                f"BREAK GLASS: {notice.by} approved {notice.tool} during {notice.freeze}: "
                f"{notice.reason}"
            )
        case "freeze_answer":
            return notice.text
    return None


def _decision_reason(why: DecisionReason) -> str:
    match why.kind:
        case "already_decided":
            who = " and ".join(why.by)
            return f"already {why.status}" + (f" by {who}" if who else "")
        case "expired":
            return "it expired; it was not run"
        case "needs_no_approval":
            return "this call needs no approval"
        case "already_approved_by_you":
            return "you already approved"
        case "more_approvals_needed" if why.missing:
            still = "; ".join(f"{s.needed - s.have} more toward {s.label}" for s in why.missing)
            return f"every rule must approve; still needed: {still}"
        case "more_approvals_needed":
            return f"{why.approvals} of {why.required} approvals so far"
        case "edit_not_allowed":
            return f"the policy does not allow editing {why.tool} calls"
        case "self_allow":
            return "you asked for this call, so you cannot allow it"
        case "no_allowance_offered":
            return f"the policy offers no allowance for {why.tool} here"
        case "arguments_changed":
            return (
                f"the arguments changed since this card was drawn ({why.shown} -> {why.now}); "
                "decide again on the redrawn card"
            )
        case "preview_changed":
            return "the preview changed: look again (approvals so far were reset)"


def _cancel_reason(why: CancelReason) -> str:
    match why.kind:
        case "batch_moved_on":
            return "this card belongs to an earlier request in the thread"
        case "not_waiting":
            return f"the run is no longer waiting for approval (it is {why.state})"


def refusal_text(refusal: Refused) -> str:
    match refusal.reason:
        case "unknown_workspace":
            return "Your workspace is unknown, so this cannot be checked; nothing changed."
        case "self_approval":
            return "You asked for this, so you cannot approve it yourself."
        case "other_workspace":
            return "Only members of this workspace may decide here."
        case "groups_unavailable":
            groups = ", ".join(refusal.unresolved_groups)
            return f"You are not a listed approver, and {groups} could not be looked up."
        case "not_an_approver":
            return f"Only the approvers may {refusal.action} this."
        case "card_locked":
            return "Its arguments could not be shown whole, so it cannot be approved."
        case "frozen":
            return f"A change freeze is in force ({refusal.rule}): nothing may be approved now."
        case "not_breakable":
            return f"Glass cannot be broken here: {refusal.rule}."
        case "own_break_glass":
            return "You broke glass on this call, so someone else must review it."


def card_text(card: CardCall, outcome: CardOutcome | None = None) -> str:
    arguments = card.arguments
    shown = (
        json.dumps(arguments, indent=2, ensure_ascii=False)
        if isinstance(arguments, dict)
        else str(arguments)
    )
    if outcome is not None:
        who = f" by {outcome.decided_by}" if outcome.decided_by else ""
        return f"{card.tool}: {outcome.status}{who}"
    progress = ""
    if card.required_approvals > 1 and not card.requirements:
        progress = f" ({len(card.approvals)} of {card.required_approvals} approvals)"
    for need in card.requirements:  # every rule must approve: each one's count
        progress += f"\n  {need.rule}: {len(need.approved_by)} of {need.needed} approvals"
    origin = ""
    if card.server_tool is not None:
        st = card.server_tool
        title = f" ({st.title})" if st.title else ""
        origin = f"MCP server {st.server}, tool {st.tool}{title}: {', '.join(st.labels)}\n"
    said = ""
    if card.model_reason:
        said = "the model says: " + " ".join(card.model_reason.split())[:600] + "\n"
    head = f"{card.tool} wants to run (digest {card.digest}){progress}:\n{said}{origin}{shown}"
    return head + _preview_text(card)


_PREVIEW_LINES = 10


def _preview_text(card: CardCall) -> str:
    """The deciding rule's preview: what ran, how it ended, its first lines."""
    preview = card.preview
    if preview is None:
        return ""
    ended = f"preview failed: {preview.failed}" if preview.failed else f"exit {preview.exit_status}"
    lines = preview.output.rstrip("\n").split("\n")
    shown = [f"  | {_printable(line)}" for line in lines[:_PREVIEW_LINES]]
    if len(lines) > _PREVIEW_LINES:
        shown.append(f"  | ... {len(lines) - _PREVIEW_LINES} more lines cut")
    when = preview.ran_at.strftime("%H:%M:%S UTC")
    return (
        f"\npreview: {_printable(preview.command)} ({ended}, ran {when}, "
        f"preview digest {preview.digest[:12]})\n" + "\n".join(shown)
    )


_TASK_MARKS = {
    "pending": "[ ]",
    "waiting": "[?]",
    "in_progress": "[~]",
    "complete": "[x]",
    "error": "[!]",
    "rejected": "[-]",
    "expired": "[-]",
    "not_run": "[-]",
    "approved": "[+]",
}
TASK_LINE_MAX = 120
"""Longest task line printed (a terminal line, not wrapped)."""


def _printable(text: str) -> str:
    """Untrusted text on one terminal line: control characters (escape sequences) as `?`."""
    return "".join(c if c.isprintable() else "?" for c in " ".join(text.split()))


def task_text(task: Task) -> str:
    """One line for one tool call of the run's timeline."""
    status: str
    match task.status:
        case "waiting":
            # The count is known once the card is posted (before: "waiting for approval").
            got = f" ({task.approvals[0]} of {task.approvals[1]})" if task.approvals else ""
            status = f"waiting for approval{got}"
        case "in_progress":
            status = "running"
        case "complete" | "error":
            took = "" if task.seconds is None else f" in {_took(task.seconds)}"
            status = ("done" if task.status == "complete" else "failed") + took
        case "not_run":
            status = "not run"
        case "approved":
            status = "runs in the resumed run"
        case other:
            status = other
    if task.decided_by:
        status += f" by {task.decided_by}" if task.status == "rejected" else ""
        status += "" if task.status == "rejected" else f" (approved by {task.decided_by})"
    if task.allowance_by:
        status += f" (allowance of {task.allowance_by})"
    title = _printable(f"{task.tool} {task.arguments}".strip())
    room = max(20, TASK_LINE_MAX - len(status) - 8)
    if len(title) > room:
        title = title[: room - 1] + "…"
    return f"{_TASK_MARKS[task.status]} {title}: {status}"


def plan_text(steps: tuple[str, ...]) -> str:
    """The model's plan (untrusted text) on one line, above its tasks."""
    text = _printable("plan: " + " · ".join(f"{n}. {s}" for n, s in enumerate(steps, 1)))
    return text if len(text) <= TASK_LINE_MAX else text[: TASK_LINE_MAX - 1] + "…"


def _took(seconds: float) -> str:
    return f"{round(seconds * 1000)} ms" if seconds < 1 else f"{seconds:.1f} s"


def _pending(entries: tuple[PendingEntry, ...]) -> str:
    if not entries:
        return "Nothing is waiting for your approval right now."
    return "\n".join(f"- {e.tool} in {e.channel}" for e in entries)


def _help(info: ChannelHelp) -> str:
    tools = ", ".join(f"{name} ({how})" for name, how in info.tools) or "none"
    return (
        f"{count(info.required_approvals, 'approval')} needed; decisions expire after {info.ttl}.\n"
        f"Tools: {tools}\nPolicy: {info.policy_source}"
    )
