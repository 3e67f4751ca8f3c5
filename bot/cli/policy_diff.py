"""`opsgate policy diff OLD.toml NEW.toml`: the rules a policy change adds, removes and changes,
in `policy explain`'s words, then every other setting that differs (defaults, channels,
freezes, MCP servers, the audit export).

A rule is the same rule in both files when it matches the same calls (its `prefix` or
`argument`, its `pattern` and its `name`), wherever it moved in the list; anything else it says
(its verdict, approvers, quorum, windows) is a change of it. Exits 0 whatever the difference;
2 when a file does not load.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from ..policy import Policy, Rule

__all__ = ["diff_command", "policy_diff"]

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


def _verdict(rule: Rule) -> str:
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
            lines.append(f"added {name}: {_verdict(rule)}")
            continue
        was_index, was = old_rules[key]
        if was == rule:
            continue
        changes = (
            [f"{_verdict(was)} -> {_verdict(rule)}"] if _verdict(was) != _verdict(rule) else []
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
            lines.append(f"removed {where}.rules[{index}] ({rule.label}): was {_verdict(rule)}")
    return lines
