"""`opsgate policy replay NEW.toml [--against CURRENT.toml] [--since 30d] [--json]
[--fail-on-loosen]`: what a policy change does to real traffic.

Every call the ledger recorded in the window is judged again under NEW and under the current
policy (`OPSGATE_POLICY`, or `--against`), each with its moment, channel and requester, the
change freezes and the allowances of that moment (`Rejudge`, below); the calls whose verdict
changes are printed grouped by rule, looser first: the rule that held before for a looser
call, the one that holds now for a tighter one. The database is only read (an SQLite file is
opened without migrating it; a missing one has no calls). Exits 1 under `--fail-on-loosen` when
any call is looser, else 0; 2 when a policy does not load (the error names the key).

Judging recorded calls again under one policy, as the live gate would have at their moment.

Each call gets the policy's own `decide` (memoised by tool and arguments: a ledger repeats
itself), in its channel, with the change freezes of its moment (the policy's own and the ad hoc
ones the store recorded) and the allowances that held then. An allowance is replayed as the
policy would have made it: granted on the same card, with the shape an "Allow for" click
creates under that policy (a granter's narrower choice is kept as it was), and only where that
policy offers "Allow for" on the granting call at all.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from agent_core import Tool, ToolCall
from bot.errors import ReplayError

from ..allowances import Shape, covers, load_shape, shape_of
from ..policy import CallVerdict, Direction, GateDecision, Policy, call_verdict, compare_verdicts
from ..settings import DatabaseURL, load_settings
from ..store import (
    AllowanceRow,
    FreezeRow,
    RecordedCall,
    SQLiteStore,
    Store,
    StoreError,
    open_store,
)
from ..tools import load_tools
from .audit import parse_since

__all__ = [
    "Change",
    "Granted",
    "Ledger",
    "Rejudge",
    "Replay",
    "granted_shapes",
    "replay",
    "replay_command",
]


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


DEFAULT_SINCE = "30d"


@dataclass(frozen=True, slots=True)
class Ledger:
    """What a replay reads: the window's calls, the allowances and ad hoc freezes of it, and
    the calls that granted those allowances."""

    calls: tuple[RecordedCall, ...]
    allowances: tuple[AllowanceRow, ...] = ()
    freezes: tuple[FreezeRow, ...] = ()
    granting: tuple[RecordedCall, ...] = ()


@dataclass(frozen=True, slots=True)
class Change:
    """One call whose verdict differs."""

    call: RecordedCall
    direction: Direction
    before: CallVerdict
    after: CallVerdict

    @property
    def group(self) -> str:
        """The rule it is listed under: the one that held for a looser call, the one that
        holds now for a tighter one."""
        return self.before.rule if self.direction == "looser" else self.after.rule

    def as_json(self) -> dict[str, Any]:
        return {
            "call_id": self.call.id,
            "tool": self.call.tool,
            "at": self.call.at.isoformat(),
            "channel": self.call.channel_id,
            "requester": self.call.requester,
            "before": self.before.as_json(),
            "after": self.after.as_json(),
        }


@dataclass(frozen=True, slots=True)
class Replay:
    calls: int
    looser: tuple[Change, ...]
    tighter: tuple[Change, ...]

    def as_json(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "looser": [c.as_json() for c in self.looser],
            "tighter": [c.as_json() for c in self.tighter],
        }


def replay(current: Policy, new: Policy, ledger: Ledger) -> Replay:
    """Each call's verdict under `current` and under `new`, and the calls that differ."""
    before = Rejudge(current, ledger.freezes)
    after = Rejudge(new, ledger.freezes)
    granting = {c.id: c for c in (*ledger.granting, *ledger.calls)}
    before.allow(granted_shapes(ledger.allowances, granting, before, before))
    after.allow(granted_shapes(ledger.allowances, granting, before, after))
    unchanged = _unchanged_tools(current, new, {c.tool for c in ledger.calls})
    looser: list[Change] = []
    tighter: list[Change] = []
    for call in ledger.calls:
        if call.tool in unchanged:
            continue
        old, new_verdict = before.verdict(call), after.verdict(call)
        if old == new_verdict:
            continue
        direction = compare_verdicts(old, new_verdict)
        if direction is not None:
            found = looser if direction == "looser" else tighter
            found.append(Change(call, direction, old, new_verdict))
    return Replay(len(ledger.calls), tuple(looser), tuple(tighter))


_CONTEXT = ("defaults", "channels_policy", "freezes", "mcp_servers")


def _unchanged_tools(current: Policy, new: Policy, tools: set[str]) -> set[str]:
    """The tools whose every call gets the same verdict under both policies without judging
    it: the same section (or built-in default), channels, defaults, freezes and servers."""
    if any(getattr(current, key) != getattr(new, key) for key in _CONTEXT):
        return set()
    return {t for t in tools if current.tool_policy(t) == new.tool_policy(t)}


def replay_command(args: argparse.Namespace) -> int:
    """The command line's entry (see the module)."""
    settings = load_settings(mode="audit")
    new = Policy.load(Path(args.new))
    against = Path(args.against) if args.against else settings.opsgate_policy
    current = Policy.load(against) if against else Policy.default()
    try:
        since = parse_since(args.since or DEFAULT_SINCE)
    except ValueError as exc:
        raise ReplayError(f"policy replay: --since: {exc}") from None
    ledger = asyncio.run(read_ledger(settings.opsgate_db, since))
    result = replay(current, new, ledger)
    if args.json:
        print(json.dumps(result.as_json(), sort_keys=True), file=sys.stdout)
    else:
        report(result, current, new, since, out=sys.stdout)
    return 1 if args.fail_on_loosen and result.looser else 0


async def read_ledger(db: Path | DatabaseURL, since: datetime) -> Ledger:
    """The window's calls, allowances and ad hoc freezes; nothing when there is no database
    file yet. Never creates a database or changes its schema."""
    try:
        if isinstance(db, DatabaseURL):
            async with open_store(db, migrate=False) as store:
                return await _read(store, since)
        if not await asyncio.to_thread(db.is_file):
            return Ledger(calls=())
        async with SQLiteStore(db) as sqlite:
            return await _read(sqlite, since)
    except StoreError as exc:
        raise ReplayError(f"policy replay: cannot read the ledger: {exc}") from None


async def _read(store: Store, since: datetime) -> Ledger:
    calls = await store.recorded_calls(since=since)
    allowances = await store.allowances_since(since)
    freezes = await store.ad_hoc_freezes(ending_after=since)
    seen = {c.id for c in calls}
    granting = []
    for row in allowances:
        if row.ledger_id in seen:
            continue
        call = await store.get_call(row.ledger_id)
        if call is not None:
            granting.append(
                RecordedCall(
                    call.id, call.name, call.arguments, row.created_at, row.channel_id, None
                )
            )
    return Ledger(tuple(calls), tuple(allowances), tuple(freezes), tuple(granting))


def _shown(call: RecordedCall) -> str:
    if call.tool == "run_command":
        try:
            command = json.loads(call.arguments).get("command")
        except (ValueError, AttributeError):
            command = None
        if isinstance(command, str):
            return f"run_command {command}"
    return f"{call.tool} {call.arguments}"


def report(result: Replay, current: Policy, new: Policy, since: datetime, *, out: TextIO) -> None:
    """The changed calls in words, grouped by rule, with counts."""
    when = since.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"replay: {result.calls} calls since {when}: {new.source} against {current.source}",
    ]
    for label, changes in (("looser", result.looser), ("tighter", result.tighter)):
        lines.append(f"{label}: {len(changes)} call{'' if len(changes) == 1 else 's'}")
        groups: dict[str, list[Change]] = defaultdict(list)
        for change in changes:
            groups[change.group].append(change)
        for rule, found in sorted(groups.items()):
            lines.append(f"  {rule}: {len(found)} call{'' if len(found) == 1 else 's'}")
            for change in found:
                call = change.call
                at = call.at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
                by = f" by {call.requester}" if call.requester else ""
                lines.append(
                    f"    {at} {call.id} in {call.channel_id}{by}: {_shown(call)}: "
                    f"{change.before.words()} -> {change.after.words()}"
                )
    print("\n".join(lines), file=out)
