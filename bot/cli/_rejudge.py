"""Judging recorded calls again under one policy, as the live gate would have at their moment.

Each call gets the policy's own `decide` (memoised by tool and arguments: a ledger repeats
itself), in its channel, with the change freezes of its moment (the policy's own and the ad hoc
ones the store recorded) and the allowances that held then. An allowance is replayed as the
policy would have made it: granted on the same card, with the shape an "Allow for" click
creates under that policy (a granter's narrower choice is kept as it was), and only where that
policy offers "Allow for" on the granting call at all.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from agent_core import Tool, ToolCall

from ..allowances import Shape, covers, load_shape, shape_of
from ..policy import CallVerdict, GateDecision, Policy, call_verdict
from ..store import AllowanceRow, FreezeRow, RecordedCall
from ..tools import load_tools

__all__ = ["Granted", "Rejudge", "granted_shapes"]


@dataclass(frozen=True, slots=True)
class Granted:
    """An allowance as one policy would have granted it."""

    channel_id: str
    tool: str
    shape: Shape
    start: datetime
    end: datetime


def _arguments(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class Rejudge:
    """One policy's verdicts on recorded calls (see the module)."""

    def __init__(self, policy: Policy, freezes: Sequence[FreezeRow]) -> None:
        self.policy = policy
        self.tools: dict[str, Tool] = {t.name: t for t in load_tools(policy.tools_modules)}
        self._decisions: dict[tuple[str, str], GateDecision] = {}
        self._freezes = freezes
        self._granted: dict[tuple[str, str], list[Granted]] = {}
        self._verdicts: dict[tuple[str, str, str, bool, bool], CallVerdict] = {}

    def decision(self, tool: str, arguments: str) -> GateDecision:
        key = (tool, arguments)
        found = self._decisions.get(key)
        if found is None:
            call = ToolCall(id="replay", name=tool, arguments=arguments)
            found = self.policy.decide(self.tools.get(tool, tool), call)
            self._decisions[key] = found
        return found

    def allow(self, granted: Sequence[Granted]) -> None:
        """The allowances this policy would have granted (`granted_shapes`)."""
        self._granted = {}
        for item in granted:
            self._granted.setdefault((item.channel_id, item.tool), []).append(item)

    def frozen(self, call: RecordedCall) -> bool:
        for freeze in self._freezes:
            if (
                freeze.channel_id == call.channel_id
                and freeze.starts_at <= call.at < freeze.ends_at
            ):
                return True
        if not self.policy.freezes:
            return False
        active = self.policy.active_freezes(call.at)
        return any(f.covers(call.channel_id, call.tool) for f in active)

    def verdict(self, call: RecordedCall) -> CallVerdict:
        decision = self.decision(call.tool, call.arguments)
        frozen = allowance = False
        if decision.requires_approval and not decision.forbidden:
            frozen = self.frozen(call)
            allowance = not frozen and self._covered(call, decision)
        key = (call.tool, call.arguments, call.channel_id, frozen, allowance)
        found = self._verdicts.get(key)
        if found is None:
            found = call_verdict(
                self.policy, decision, call.channel_id, frozen=frozen, allowance=allowance
            )
            self._verdicts[key] = found
        return found

    def _covered(self, call: RecordedCall, decision: GateDecision) -> bool:
        held = self._granted.get((call.channel_id, call.tool))
        if not held:
            return False
        if self.policy.allow_window(call.tool, call.channel_id, decision) is None:
            return False
        arguments = _arguments(call.arguments)
        return any(
            g.start <= call.at < g.end and covers(g.shape, call.tool, arguments, decision)
            for g in held
        )


def granted_shapes(
    allowances: Sequence[AllowanceRow],
    granting: Mapping[str, RecordedCall],
    recorded: Rejudge,
    judge: Rejudge,
) -> list[Granted]:
    """The allowances `judge`'s policy would have granted on the same cards: `recorded` is the
    policy the recorded shapes are compared with (a shape equal to the one its click creates
    there becomes the one the click creates under `judge`)."""
    found = []
    for row in allowances:
        call = granting.get(row.ledger_id)
        stored = load_shape(row.shape)
        if call is None or stored is None:
            continue
        end = min(row.expires_at, row.revoked_at) if row.revoked_at else row.expires_at
        decision = judge.decision(call.tool, call.arguments)
        if not decision.requires_approval or decision.forbidden:
            continue
        if judge.policy.allow_window(call.tool, row.channel_id, decision) is None:
            continue
        arguments = _arguments(call.arguments)
        usual = shape_of(call.tool, arguments, recorded.decision(call.tool, call.arguments))
        shape = shape_of(call.tool, arguments, decision) if stored == usual else stored
        if shape is not None:
            found.append(Granted(row.channel_id, row.tool, shape, row.created_at, end))
    return found
