"""The approval gate: does one tool call wait for a human, and which rule of the policy said so.

The answer is a `GateDecision` rather than a bare bool because the audit log records the rule
next to every decision.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from agent_core import Tool, ToolCall
from bot.argument_rule import schema_defaults

from ._model import ArgumentRule, ToolPolicy

__all__ = ["GateDecision", "approval_summary", "built_in_tools", "decide"]


@dataclass(frozen=True, slots=True)
class GateDecision:
    """Whether a call waits for a human, and the policy rule that said so (for the audit log)."""

    requires_approval: bool
    rule: str


def built_in_tools() -> Mapping[str, ToolPolicy]:
    """The sections that apply to the built-in tools when the file has none for them."""
    return MappingProxyType(
        {
            "run_command": ToolPolicy(approval="always"),
            "http_request": ToolPolicy(
                approval="rules",
                rules=(
                    ArgumentRule(
                        argument="method",
                        pattern=re.compile(r"^(?!\s*(?i:get|head)\s*$)"),
                        name="methods other than GET and HEAD",
                    ),
                ),
            ),
        }
    )


def _risky_by_default(tool: Tool | str) -> bool:
    """An unconfigured tool asks when it says so; a bare name of one is treated as risky."""
    return True if isinstance(tool, str) else tool.requires_approval()


def approval_summary(
    tool: Tool | str, tools: Mapping[str, ToolPolicy], built_in: Mapping[str, ToolPolicy]
) -> str:
    """When calls of a tool wait for a human, in a few words (for `/opsgate help`)."""
    name = tool if isinstance(tool, str) else tool.name
    config = tools.get(name) or built_in.get(name)
    if config is None:
        return "asks for approval" if _risky_by_default(tool) else "runs without approval"
    if config.approval == "always":
        return "asks for approval"
    if config.approval == "never":
        return "runs without approval"
    labels = [r.name or f"{r.argument} matches /{r.pattern.pattern}/" for r in config.rules]
    return "asks for approval for " + "; ".join(labels)


def decide(
    tool: Tool | str,
    call: ToolCall,
    tools: Mapping[str, ToolPolicy],
    built_in: Mapping[str, ToolPolicy],
) -> GateDecision:
    """Whether `call` waits for a human, and which rule decided.

    Order: the file's `[tools.<name>]`, then the built-in default for built-in tools, then the
    tool's own `requires_approval()` (only known when `tool` is a `Tool`; a bare name of an
    unconfigured tool is treated as risky).
    """
    name = tool if isinstance(tool, str) else tool.name
    if name in tools:
        where, config = f"tools.{name}", tools[name]
    elif name in built_in:
        where, config = f"built-in default for {name}", built_in[name]
    else:
        risky = _risky_by_default(tool)
        return GateDecision(
            risky,
            f"no [tools.{name}] in the policy: the tool's own default "
            f"({'approval required' if risky else 'no approval'})",
        )
    if config.approval != "rules":
        return GateDecision(config.approval == "always", f"{where}: approval = {config.approval}")
    try:
        arguments = call.parsed_arguments()
    except ValueError:
        return GateDecision(True, f"{where}: arguments unreadable, approval required")
    defaults = {} if isinstance(tool, str) else schema_defaults(tool.parameters)
    for index, rule in enumerate(config.rules):
        if rule.matches(arguments, defaults):
            label = rule.name or f"{rule.argument} ~ /{rule.pattern.pattern}/"
            return GateDecision(True, f"{where}.rules[{index}] ({label})")
    return GateDecision(False, f"{where}: no rule matched")
