"""The approval gate: what one tool call gets (runs, waits for approval, never runs), under which
rule, and with whose approvals.

The answer is a typed `GateDecision`, not a bool or a message: the gate, the card, the
approvals and the audit each read the field they need (the rule's approvers, quorum, time limit,
allowance window, justification). Verdict order: forbidden > the matching rule with the most
required approvals > always > never; a compound shell command takes the strictest verdict of
its parts, and under `approval = "rules"` a command that cannot be judged by its words needs
approval at least (see `bot.policy._shell`).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from types import MappingProxyType
from typing import Any

from agent_core import Tool, ToolCall

from ._fields import schema_defaults
from ._model import ToolPolicy
from ._preview import PreviewPlan, in_context, tool_preview
from ._programs import layout, risky_options
from ._rules import TIER_RANK, Rule, Tier, program_is
from ._shell import ParsedCommand, SimpleCommand, parse_command
from ._words import FLAG_WORDS

__all__ = [
    "COMMAND_TOOL",
    "GateDecision",
    "PartVerdict",
    "Requirement",
    "approval_summary",
    "built_in_tools",
    "decide",
    "rule_name",
]

COMMAND_TOOL = "run_command"


@dataclass(frozen=True, slots=True)
class PartVerdict:
    """What one simple command of a shell command got, and why (for `policy explain`)."""

    text: str
    argv: tuple[str, ...]
    tier: Tier
    policy_rule: str | None
    why: str


@dataclass(frozen=True, slots=True)
class Requirement:
    """What one matched rule needs before the call may run: its approvers (None: the channel's,
    else the defaults') and its quorum (None: the channel's, else the defaults'). A call whose
    parts match several rules that ask must meet every one of them at once."""

    policy_rule: str | None
    """`tools.<tool>.rules[<index>]`; None: no rule of its own (the channel's approvers)."""
    rule_label: str | None = None
    approvers: tuple[str, ...] | None = None
    required_approvals: int | None = None

    @property
    def key(self) -> str:
        """What an approval is counted toward in the ledger (stable for one policy)."""
        return self.policy_rule or "channel"


@dataclass(frozen=True, slots=True)
class GateDecision:
    """What a call gets and the rule that said so. The overrides are the deciding rule's
    (None: the channel's, or the defaults', apply). Strictest part wins means every part's
    requirement holds at once: when the parts match several rules that ask, `requirements`
    holds each of them (`needs`), and an approval must meet them all."""

    requires_approval: bool
    rule: str
    """In words, for the audit log's `rule` of the gate row and for `/opsgate help`."""
    forbidden: bool = False
    policy_rule: str | None = None
    """`tools.<tool>.rules[<index>]` of the deciding rule (the audit's `policy_rule`)."""
    rule_label: str | None = None
    """What the deciding rule matches, in words: its prefix and pattern, or its `name` (the
    audit's `policy_match`)."""
    approvers: tuple[str, ...] | None = None
    required_approvals: int | None = None
    ttl: timedelta | None = None
    allow_for: timedelta | None = None
    allow_prefix: tuple[str, ...] | None = None
    justification: str | None = None
    parts: tuple[PartVerdict, ...] = ()
    """run_command: each simple command's own verdict."""
    command: ParsedCommand | None = None
    """run_command: the parsed command (its flags say whether an allowance may cover it)."""
    preview: PreviewPlan | None = None
    """The deciding rule's `preview`, built from the simple command it matched."""
    break_glass: bool = False
    """During a freeze, the card offers "Break glass" (the rule's or the tool's
    `break_glass`; never for a forbidden call)."""
    requirements: tuple[Requirement, ...] = ()
    """Every requirement that must hold, the deciding rule's first, when the call's parts
    match more than one rule that asks; empty: the one requirement of the fields above."""

    @property
    def tier(self) -> Tier:
        if self.forbidden:
            return "forbidden"
        return "always" if self.requires_approval else "never"

    def needs(self) -> tuple[Requirement, ...]:
        """Every requirement an approval must meet (none when nothing may approve the call
        or it needs no approval)."""
        if not self.requires_approval or self.forbidden:
            return ()
        if self.requirements:
            return self.requirements
        own = (self.policy_rule, self.rule_label, self.approvers, self.required_approvals)
        return (Requirement(*own),)

    def under(self, requirement: Requirement) -> GateDecision:
        """This decision as `requirement` alone would have it (its approvers and quorum), for
        the rules that ask "may this person approve under that rule?"."""
        return replace(
            self,
            policy_rule=requirement.policy_rule,
            rule_label=requirement.rule_label,
            approvers=requirement.approvers,
            required_approvals=requirement.required_approvals,
            requirements=(),
        )


def rule_name(tool: str, index: int) -> str:
    return f"tools.{tool}.rules[{index}]"


def built_in_tools() -> Mapping[str, ToolPolicy]:
    """The sections that apply to the built-in tools when the file has none for them."""
    return MappingProxyType(
        {
            "run_command": ToolPolicy(approval="always"),
            "http_request": ToolPolicy(
                approval="rules",
                rules=(
                    Rule(
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
    text = _summary(name, config)
    return text + (f" (preview: {config.preview})" if config.preview else "")


def _summary(name: str, config: ToolPolicy) -> str:
    if config.approval == "always":
        return "asks for approval"
    if config.approval == "never":
        return "runs without approval"
    if config.approval == "forbidden":
        return "never runs (forbidden)"
    asks = [_asks(r) for r in config.rules if r.approval == "always"]
    if name == COMMAND_TOOL:
        asks.append("commands it cannot judge (substitution, eval, sh -c, wrappers)")
    text = "asks for approval for " + "; ".join(asks) if asks else "runs without approval"
    never = [r.label for r in config.rules if r.approval == "forbidden"]
    free = [r.label for r in config.rules if r.approval == "never"]
    if never:
        text += "; never runs " + "; ".join(never)
    if free:
        text += "; runs freely " + "; ".join(free)
    if name == COMMAND_TOOL or config.default is not None:
        other = "command" if name == COMMAND_TOOL else "call"
        default = config.unmatched(name)
        does = "asks for approval" if default == "always" else "runs without approval"
        text += f'; any other {other} {does} (default = "{default}")'
    return text


def _asks(rule: Rule) -> str:
    count = rule.required_approvals
    text = f"{rule.label} ({count} approvals)" if count and count > 1 else rule.label
    return text + (f" (preview: {rule.preview})" if rule.preview else "")


def decide(
    tool: Tool | str,
    call: ToolCall,
    tools: Mapping[str, ToolPolicy],
    built_in: Mapping[str, ToolPolicy],
) -> GateDecision:
    """What `call` gets, and which rule decided.

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
    try:
        arguments = call.parsed_arguments()
    except ValueError:
        arguments = None
    defaults = {} if isinstance(tool, str) else schema_defaults(tool.parameters)
    decision = _configured(name, where, config, arguments, defaults)
    if config.preview is None or not decision.requires_approval or decision.forbidden:
        return decision
    plan = tool_preview(
        config.preview, config.preview_args or {}, arguments or {}, defaults, config.preview_ttl
    )
    return replace(decision, preview=plan)


def _configured(
    name: str,
    where: str,
    config: ToolPolicy,
    arguments: dict[str, Any] | None,
    defaults: dict[str, Any],
) -> GateDecision:
    """The verdict of a tool the policy has a section for (before the tool's preview)."""
    if config.approval != "rules":
        rule = f"{where}: approval = {config.approval}"
        forbidden = config.approval == "forbidden"
        return GateDecision(
            config.approval != "never",
            rule,
            forbidden,
            break_glass=config.break_glass and not forbidden,
        )
    if arguments is None:
        return GateDecision(True, f"{where}: arguments unreadable, approval required")
    command = arguments.get("command") if name == COMMAND_TOOL else None
    if name == COMMAND_TOOL and not isinstance(command, str):
        return GateDecision(True, f"{where}: no command text, approval required")
    judge = _Judge(
        name, where, config.rules, break_glass=config.break_glass, default=config.unmatched(name)
    )
    return judge.call(arguments, defaults, command)


@dataclass
class _Candidate:
    tier: Tier
    quorum: int
    rule: Rule | None
    index: int | None
    why: str
    part: SimpleCommand | None = None
    """The simple command the rule matched (its preview is built from it)."""

    def key(self) -> tuple[int, int]:
        return TIER_RANK[self.tier], self.quorum if self.tier == "always" else 0


def _stricter(candidate: _Candidate, best: _Candidate) -> bool:
    if candidate.key() != best.key():
        return candidate.key() > best.key()
    return best.rule is None and candidate.rule is not None


class _Judge:
    """The strictest of the candidates a call's parts and arguments produce."""

    def __init__(
        self,
        tool: str,
        where: str,
        rules: tuple[Rule, ...],
        *,
        break_glass: bool = False,
        default: Tier = "always",
    ) -> None:
        self.tool = tool
        self.where = where
        self.rules = rules
        self.break_glass = break_glass
        """The tool's own `break_glass` (a rule may set it too)."""
        self.default = default
        """What a call (or a part) no rule matches gets: the tool's `default`."""

    def _strictest(
        self, matches: list[tuple[int, Rule]], maybe: frozenset[int] = frozenset()
    ) -> _Candidate | None:
        """The strictest of the rules that match (the first of them on a tie); those in
        `maybe` could match (the verb's place is unknown), and say so."""
        best: _Candidate | None = None
        for index, rule in matches:
            why = rule.label + (
                " (could match: the verb's place is unknown)" if index in maybe else ""
            )
            found = _Candidate(rule.approval, rule.required_approvals or 0, rule, index, why)
            if best is None or found.key() > best.key():
                best = found
        return best

    def name(self, index: int) -> str:
        return f"{self.where}.rules[{index}]"

    def _unmatched(self, why: str) -> _Candidate:
        return _Candidate(
            self.default, 0, None, None, f'{why}: the tool\'s default = "{self.default}"'
        )

    def call(
        self, arguments: dict[str, object], defaults: dict[str, object], command: str | None
    ) -> GateDecision:
        by_arguments = [
            (i, r) for i, r in enumerate(self.rules) if r.matches_arguments(arguments, defaults)
        ]
        candidates = [c for c in [self._strictest(by_arguments)] if c is not None]
        if command is None and not candidates:
            candidates.append(self._unmatched("no rule matched"))
        parts: list[PartVerdict] = []
        parsed = parse_command(command) if command is not None else None
        if parsed is not None and not parsed.parts:
            candidates.append(self._unmatched("no simple command in it"))
        for part in parsed.parts if parsed is not None else ():
            chosen = self._part(part)
            candidates.append(chosen)
            name = None if chosen.index is None else self.name(chosen.index)
            parts.append(PartVerdict(part.text, part.argv, chosen.tier, name, chosen.why))
        if parsed is not None and parsed.unjudgeable:
            words = "; ".join(FLAG_WORDS[f] for f in sorted(parsed.unjudgeable))
            candidates.append(_Candidate("always", 0, None, None, f"{words}: approval required"))
        return self._verdict(candidates, tuple(parts), parsed)

    def _part(self, part: SimpleCommand) -> _Candidate:
        """One simple command's candidate: the strictest rule that matches it (or could, where
        a rule asks or forbids), else the tool's default; never free when it cannot be judged
        by its words, when the verb's place is unknown, or when it uses an option that writes
        or runs something."""
        fits = [(i, r, r.fits(part)) for i, r in enumerate(self.rules)]
        maybe = frozenset(i for i, _, fit in fits if fit == "maybe")
        matches = [
            (i, r)
            for i, r, fit in fits
            if fit == "yes" or (fit == "maybe" and r.approval != "never")
        ]
        chosen = self._strictest(matches, maybe)
        if chosen is None:
            named = any(r.prefix and program_is(part.program, r.prefix[0]) for r in self.rules)
            said = "no rule matched" if named else f"no rule names the program {part.program!r}"
            chosen = self._unmatched(said)
        where = layout(part.argv)
        leading = where.leading(part.argv)
        rule = chosen.rule
        if rule is not None and rule.prefix and len(rule.prefix) > 1 and leading and where.verb:
            chosen.why += f" (its verb after {shlex.join(leading)})"
        chosen = replace(chosen, part=part)
        if chosen.tier != "never" and chosen.rule is not None:
            return chosen
        reasons = [FLAG_WORDS[f] for f in sorted(part.unjudgeable)]
        if maybe:
            reasons.append(
                f"the option {where.unknown!r} is not one the policy knows {part.program!r} to "
                "take before its verb, so its verb's place is unknown"
            )
        reasons += [f"the option {opt} {why}" for opt, why in risky_options(part.argv, where)]
        if not reasons or chosen.tier == "forbidden":
            return chosen
        index = chosen.index
        said = f" ({self.name(index)} alone would not ask)" if index is not None else ""
        text = f"{'; '.join(reasons)}: approval required{said}"
        return _Candidate("always", 0, None, None, text, part)

    def _verdict(
        self,
        candidates: list[_Candidate],
        parts: tuple[PartVerdict, ...],
        parsed: ParsedCommand | None,
    ) -> GateDecision:
        best: _Candidate | None = None
        for candidate in candidates:  # the first of the strictest (a named rule on a tie)
            if best is None or _stricter(candidate, best):
                best = candidate
        if best is None or (best.tier == "never" and best.rule is None):
            text = f"{self.where}: no rule matched"
            return GateDecision(False, text, parts=parts, command=parsed)
        rule = best.rule
        if rule is None or best.index is None:
            text = f"{self.where}: {best.why}"
            glass = self.break_glass
            return GateDecision(True, text, parts=parts, command=parsed, break_glass=glass)
        name = self.name(best.index)
        needs = self._requirements(best, candidates)
        decision = GateDecision(
            best.tier != "never",
            f"{name} ({rule.label})",
            forbidden=best.tier == "forbidden",
            policy_rule=name,
            rule_label=rule.label,
            approvers=rule.approvers,
            required_approvals=rule.required_approvals,
            ttl=rule.ttl,
            allow_for=rule.allow_for,
            allow_prefix=rule.allow_prefix,
            justification=rule.justification,
            parts=parts,
            command=parsed,
            preview=None if best.part is None else self._preview(rule, best.part, parsed),
            break_glass=best.tier == "always" and (rule.break_glass or self.break_glass),
        )
        if len(needs) < 2:
            return decision
        # Several rules ask: each must be met, and no allowance covers the call.
        return replace(decision, requirements=needs, allow_for=None, allow_prefix=None)

    @staticmethod
    def _preview(
        rule: Rule, part: SimpleCommand, parsed: ParsedCommand | None
    ) -> PreviewPlan | None:
        """The rule's preview of `part`, failed when the command around it moves it elsewhere."""
        return in_context(rule.preview_for(part), () if parsed is None else parsed.parts, part)

    def _requirements(
        self, best: _Candidate, candidates: list[_Candidate]
    ) -> tuple[Requirement, ...]:
        """One requirement per rule that asks (the deciding one first), and the channel's for
        a part no rule judged; the same approvers and quorum twice count once."""
        if best.tier != "always":
            return ()
        found: list[Requirement] = []
        for candidate in [best, *candidates]:
            if candidate.tier != "always":
                continue
            rule, index = candidate.rule, candidate.index
            if rule is None or index is None:
                need = Requirement(None)
            else:
                need = Requirement(
                    self.name(index), rule.label, rule.approvers, rule.required_approvals
                )
            same = (need.approvers, need.required_approvals)
            if not any(
                n.key == need.key or (n.approvers, n.required_approvals) == same for n in found
            ):
                found.append(need)
        return tuple(found)
