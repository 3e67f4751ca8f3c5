"""`opsgate policy explain [--channel C] TOOL ARGS`: what the policy says of one call, run nothing;
and `opsgate policy diff OLD NEW`, the same words for the rules a change of the file touches.

ARGS is the command text for `run_command`, a JSON object otherwise. The answer shows the parsed
parts of a shell command and the rule that decided each, then one line starting `verdict: `
(`forbidden ...`, `needs N approval(s) from <who>`, `runs without approval`, or `covered by
allowance <id> ...` when an active allowance of the channel would let it run), then who may
approve, the quorum, the time limit, the shape an "Allow for" would create and the deciding
rule's preview (the command it would run, never run here) and, while one of the policy's
freezes is in force and covers the call, a `freeze: ` line (no Approve until when; who may
break glass). With
`--channel`, the channel's approvers apply and its allowances are read from the configured
database, read-only. Exits 0 whatever the verdict; 1 for a tool the bot does not have (it says
so, and gives no verdict); 2 when the policy or the arguments are unusable.

The lines `opsgate policy explain` adds about what happens when nobody answers: the
reminders, each escalation step, and who is on call now for each on-call name.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from agent_core import Tool, ToolCall
from bot.errors import BotError, ExplainError

from ..allowances import covers, examples_for, load_shape, offered_shapes, shape_of
from ..policy import GateDecision, Policy, Rule, ladder_for, oncall_now
from ..settings import DatabaseURL, load_settings
from ..store import AllowanceRow, SQLiteStore, StoreError, open_store
from ..tools import load_tools
from ..words import format_duration

__all__ = [
    "diff_command",
    "explain",
    "explain_command",
    "explain_text",
    "ladder_lines",
    "policy_diff",
]

COMMAND_TOOL = "run_command"
BUILT_IN_TOOLS = (COMMAND_TOOL, "http_request")


def explain_command(args: argparse.Namespace) -> int:
    """The command line's entry: settings (the policy file, the database), then `explain`."""
    settings = load_settings(mode="audit")
    path = settings.opsgate_policy
    policy = Policy.load(path) if path else Policy.default()
    text = " ".join(args.args)
    rows = asyncio.run(_allowances(settings.opsgate_db, args.channel)) if args.channel else []
    return explain(policy, args.tool, text, channel=args.channel, allowances=rows, out=sys.stdout)


async def _allowances(db: Path | DatabaseURL, channel: str) -> list[AllowanceRow]:
    """The channel's active allowances; none when there is no database yet. Never creates a
    database or changes its schema."""
    try:
        if isinstance(db, DatabaseURL):
            async with open_store(db, migrate=False) as store:
                return await store.active_allowances(channel_id=channel)
        if not await asyncio.to_thread(db.is_file):
            return []
        async with SQLiteStore(db) as sqlite:
            return await sqlite.active_allowances(channel_id=channel)
    except StoreError as exc:
        raise ExplainError(f"policy explain: cannot read the allowances: {exc}") from None


def explain(
    policy: Policy,
    tool_name: str,
    text: str,
    *,
    channel: str | None = None,
    allowances: Sequence[AllowanceRow] = (),
    out: TextIO,
    now: datetime | None = None,
) -> int:
    """Print what the policy says of one call of `tool_name` with `text` (see the module);
    `now` (default: the clock's) is when the policy's freezes are looked at."""
    tools = {t.name: t for t in load_tools(policy.tools_modules, taken=())}
    known = sorted({*BUILT_IN_TOOLS, *tools, *policy.tools})
    server = tool_name.partition("__")[0] if "__" in tool_name else None
    if tool_name not in known and server not in policy.mcp_servers:
        print(
            f"policy: {policy.source}\ntool: {tool_name}\nunknown tool {tool_name!r}: the bot "
            f"has no such tool, so there is no verdict; known tools: {', '.join(known)}"
            + (", and the MCP servers' NAME__TOOL" if policy.mcp_servers else ""),
            file=out,
        )
        return 1
    arguments = _arguments(tool_name, text)
    tool: Tool | str = tools.get(tool_name, tool_name)
    call = ToolCall(id="explain", name=tool_name, arguments=json.dumps(arguments))
    decision = policy.decide(tool, call)
    lines = [f"policy: {policy.source}", f"tool: {tool_name}"]
    if tool_name == COMMAND_TOOL:
        lines.append(f"command: {arguments.get('command')}")
    else:
        lines.append(f"arguments: {json.dumps(arguments, sort_keys=True)}")
    for number, part in enumerate(decision.parts, start=1):
        lines.append(f"part {number}: {part.text}")
        rule = part.policy_rule or "no rule"
        lines.append(f"  {rule}: {part.why} -> {_tier_words(part.tier)}")
    parsed = decision.command
    if parsed is not None:
        whole = parsed.unjudgeable.difference(*(p.flags for p in parsed.parts))
        if whole:  # e.g. `PATH=/tmp; ls`, text that does not parse
            lines.append(f"the whole command: {', '.join(sorted(whole))}: approval required")
    lines.append(f"decided by: {decision.rule}")
    if decision.justification:
        lines.append(f"justification: {decision.justification}")
    covering = _covering(policy, tool_name, arguments, decision, channel, allowances)
    lines.append(_verdict(policy, decision, channel, covering))
    lines += _terms(policy, tool_name, arguments, decision, channel)
    lines += _preview(decision)
    lines += _freezes(policy, tool_name, decision, channel, now or datetime.now(UTC))
    lines += ladder_lines(policy, decision, now or datetime.now(UTC))
    print("\n".join(lines), file=out)
    return 0


def explain_text(policy: Policy, command: str, channel: str | None = None) -> str:
    """What `opsgate policy explain run_command <command>` prints for this policy (the local
    workspace's page shows it), or why it cannot."""
    out = io.StringIO()
    try:
        explain(policy, COMMAND_TOOL, command, channel=channel, out=out)
    except BotError as exc:
        return f"cannot explain it: {exc}"
    return out.getvalue()


def _freezes(
    policy: Policy, tool: str, decision: GateDecision, channel: str | None, now: datetime
) -> list[str]:
    """The policy's freezes in force now that block this call's Approve (ad hoc ones live in
    the database and are not read here)."""
    if not decision.requires_approval or decision.forbidden:
        return []
    lines = []
    for freeze in policy.active_freezes(now):
        shown = channel
        if channel is None and freeze.channels:
            shown = freeze.channels[0]  # without --channel: wherever the freeze holds
        if not freeze.covers(shown, tool):
            continue
        where = ""
        if channel is None and freeze.channels:
            where = f" in {', '.join(freeze.channels)}"
        until = freeze.until.strftime("%Y-%m-%d %H:%M UTC")
        said = f" ({freeze.message})" if freeze.message else ""
        if decision.break_glass:
            spec = policy.break_glass_approvers(decision)
            who = ", ".join((*spec.users, *(f"members of {g}" for g in spec.groups))) or "nobody"
            glass = f"Break glass offered to {who}"
        else:
            glass = "no Break glass"
        lines.append(
            f"freeze: {freeze.label} in force{where} until {until}{said}: "
            f"no Approve until then; {glass}"
        )
    return lines


def _preview(decision: GateDecision) -> list[str]:
    """The deciding rule's preview: the template and the argv it would run (not
    run here), or why it would fail."""
    plan = decision.preview
    if plan is None:
        return []
    ttl = format_duration(plan.ttl)
    if plan.missing is not None or (plan.argv is None and plan.tool is None):
        return [f"preview: {plan.template} -> would fail: {plan.missing} (preview_ttl {ttl})"]
    return [f"preview: {plan.template} -> would run: {plan.shown()} (preview_ttl {ttl})"]


def _arguments(tool: str, text: str) -> dict[str, Any]:
    if tool == COMMAND_TOOL:
        return {"command": text}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ExplainError(
            f"policy explain: the arguments of {tool!r} are not JSON: {exc}"
        ) from None
    if not isinstance(value, dict):
        raise ExplainError(f"policy explain: the arguments of {tool!r} must be a JSON object")
    return value


def _tier_words(tier: str) -> str:
    return {"never": "runs without approval", "forbidden": "forbidden"}.get(tier, "needs approval")


def _who(policy: Policy, decision: GateDecision, channel: str | None) -> str:
    spec = policy.approvers_for(channel, decision)
    if spec.anyone:
        if policy.allow_self_approval:
            return "anyone in the channel"
        return "anyone in the channel but the requester"
    return ", ".join((*spec.users, *(f"members of {g}" for g in spec.groups)))


def _covering(
    policy: Policy,
    tool: str,
    arguments: dict[str, Any],
    decision: GateDecision,
    channel: str | None,
    allowances: Sequence[AllowanceRow],
) -> AllowanceRow | None:
    if not decision.requires_approval or decision.forbidden:
        return None
    if policy.allow_window(tool, channel, decision) is None:
        return None
    for row in allowances:
        shape = load_shape(row.shape)
        if row.tool == tool and shape is not None and covers(shape, tool, arguments, decision):
            return row
    return None


def _verdict(
    policy: Policy, decision: GateDecision, channel: str | None, covering: AllowanceRow | None
) -> str:
    if decision.forbidden:
        why = f": {decision.justification}" if decision.justification else ""
        return f"verdict: forbidden by {decision.policy_rule or decision.rule}{why}"
    if not decision.requires_approval:
        return "verdict: runs without approval"
    if covering is not None:
        until = covering.expires_at.strftime("%Y-%m-%d %H:%M UTC")
        return (
            f"verdict: covered by allowance {covering.id} (granted by {covering.granted_by}, "
            f"until {until}): runs without a card"
        )
    needs = decision.needs()
    if len(needs) > 1:  # every rule that asks must approve, each with its own quorum
        each = "; ".join(
            f"{n.policy_rule or 'the channel'} {_needs(policy, decision.under(n), channel)}"
            for n in needs
        )
        return f"verdict: every one of these must approve: {each}"
    return f"verdict: {_needs(policy, decision, channel)}"


def _needs(policy: Policy, decision: GateDecision, channel: str | None) -> str:
    count = policy.required_approvals_for(channel, decision)
    noun = "approval" if count == 1 else "approvals"
    return f"needs {count} {noun} from {_who(policy, decision, channel)}"


def _terms(
    policy: Policy,
    tool: str,
    arguments: dict[str, Any],
    decision: GateDecision,
    channel: str | None,
) -> list[str]:
    if not decision.requires_approval or decision.forbidden:
        return []
    spec = policy.approvers_for(channel, decision)
    lines = [
        f"approvers: {_who(policy, decision, channel)} ({spec.source})",
        f"quorum: {policy.required_approvals_for(channel, decision)}",
        f"ttl: {format_duration(policy.ttl_for(decision))}",
    ]
    window = policy.allow_window(tool, channel, decision)
    shape = shape_of(tool, arguments, decision)
    if window is None or shape is None:
        lines.append('allow: the card offers no "Allow for" for this call')
        return lines
    lines.append(f'allow: "Allow for {format_duration(window)}" creates: {shape.label(tool)}')
    offered = offered_shapes(tool, arguments, decision)
    lines.append("  shapes offered: " + " | ".join(s.label(tool) for s in offered))
    matching, not_matching = examples_for(shape)
    lines.append("  covers: " + " | ".join(matching))
    lines.append("  does not cover: " + " | ".join(not_matching))
    return lines


def ladder_lines(policy: Policy, decision: GateDecision, now: datetime) -> list[str]:
    """`reminders: …`, `escalate N: …` (for a call that waits) and `on call: …` lines."""
    lines: list[str] = []
    if decision.requires_approval and not decision.forbidden:
        ladder = ladder_for(policy, decision)
        if ladder.every is not None:
            every = format_duration(ladder.every)
            lines.append(f"reminders: every {every} to who may still decide, at most {ladder.most}")
        for number, step in enumerate(ladder.steps, start=1):
            quorum = (
                f", quorum {step.required_approvals}" if step.required_approvals is not None else ""
            )
            added = ", ".join(step.approvers)
            lines.append(
                f"escalate {number}: after {format_duration(step.after)} add {added}{quorum}"
            )
    for name, who in oncall_now(policy, now):
        lines.append(f"on call: oncall:{name} = {who or 'nobody'}")
    return lines


# -- policy diff ---------------------------------------------------------------------------------
# opsgate policy diff OLD.toml NEW.toml: the rules a policy change adds, removes and changes, in
# policy explain's words (the same rule wording, hence here), then every other setting that
# differs (defaults, channels, freezes, MCP servers, the audit export). A rule is the same rule
# in both files when it matches the same calls (its prefix or argument, its pattern and its
# name), wherever it moved in the list; anything else it says (its verdict, approvers, quorum,
# windows) is a change of it. Exits 0 whatever the difference; 2 when a file does not load.

_SECTIONS = ("defaults", "channels_policy", "freezes", "mcp_servers", "audit")

RuleKey = tuple[str, ...]


def diff_command(args: argparse.Namespace) -> int:
    old = Policy.load(Path(args.old))
    new = Policy.load(Path(args.new))
    print_diff(old, new, out=sys.stdout)
    return 0


def print_diff(old: Policy, new: Policy, *, out: TextIO) -> None:
    lines = policy_diff(old, new)
    head = f"policy diff: {old.source} -> {new.source}"
    print("\n".join([head, *(lines or ["no change"])]), file=out)


def policy_diff(old: Policy, new: Policy) -> list[str]:
    """Each difference, one line each: `added ...`, `removed ...`, `changed ...`."""
    lines: list[str] = []
    for tool in sorted(set(old.tools) | set(new.tools)):
        lines += _tool_diff(tool, old, new)
    for section in _SECTIONS:
        before = _flat(_dump(getattr(old, section)), section)
        after = _flat(_dump(getattr(new, section)), section)
        lines += _settings(before, after)
    return lines


def _dump(value: Any) -> Any:
    """Sections that are dicts or tuples of models, as JSON values."""
    if isinstance(value, dict):
        return {k: _dump(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_dump(v) for v in value]
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return value


def _flat(value: Any, where: str) -> dict[str, Any]:
    if isinstance(value, dict) and value:
        found: dict[str, Any] = {}
        for key, item in value.items():
            found |= _flat(item, f"{where}.{key}")
        return found
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        found = {}
        for index, item in enumerate(value):
            found |= _flat(item, f"{where}[{index}]")
        return found
    return {where: value}


def _shown(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _settings(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    lines = []
    for key in sorted(set(before) | set(after)):
        if key not in before:
            lines.append(f"added {key} = {_shown(after[key])}")
        elif key not in after:
            lines.append(f"removed {key} (was {_shown(before[key])})")
        elif before[key] != after[key]:
            lines.append(f"changed {key}: {_shown(before[key])} -> {_shown(after[key])}")
    return lines


def _key(rule: Rule) -> RuleKey:
    pattern = rule.pattern.pattern if rule.pattern is not None else ""
    return (*(rule.prefix or ()), "|", rule.argument or "", pattern, rule.name or "")


def _rule_verdict(rule: Rule) -> str:
    """A rule's verdict in `policy explain`'s words."""
    if rule.approval == "forbidden":
        return "forbidden"
    if rule.approval == "never":
        return "runs without approval"
    count = rule.required_approvals
    return f"needs {count} approvals" if count and count > 1 else "needs approval"


def _tool_diff(tool: str, old: Policy, new: Policy) -> list[str]:
    before, after = old.tool_policy(tool), new.tool_policy(tool)
    where = f"tools.{tool}"
    lines = _settings(
        _flat(before.model_dump(mode="json", exclude={"rules"}), where),
        _flat(after.model_dump(mode="json", exclude={"rules"}), where),
    )
    old_rules = {_key(r): (i, r) for i, r in enumerate(before.rules)}
    new_rules = {_key(r): (i, r) for i, r in enumerate(after.rules)}
    for key, (index, rule) in new_rules.items():
        name = f"{where}.rules[{index}] ({rule.label})"
        if key not in old_rules:
            lines.append(f"added {name}: {_rule_verdict(rule)}")
            continue
        was_index, was = old_rules[key]
        if was == rule:
            continue
        changes = (
            [f"{_rule_verdict(was)} -> {_rule_verdict(rule)}"]
            if _rule_verdict(was) != _rule_verdict(rule)
            else []
        )
        old_fields = was.model_dump(mode="json", exclude={"approval"})
        new_fields = rule.model_dump(mode="json", exclude={"approval"})
        changes += [
            f"{field} {_shown(old_fields[field])} -> {_shown(new_fields[field])}"
            for field in sorted(new_fields)
            if old_fields[field] != new_fields[field]
        ]
        moved = f" (was rules[{was_index}])" if was_index != index else ""
        lines.append(f"changed {name}{moved}: {'; '.join(changes) or 'moved'}")
    for key, (index, rule) in old_rules.items():
        if key not in new_rules:
            lines.append(
                f"removed {where}.rules[{index}] ({rule.label}): was {_rule_verdict(rule)}"
            )
    return lines
