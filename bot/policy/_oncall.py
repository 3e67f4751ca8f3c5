"""On-call approvers and escalation steps as the policy file writes them: `[oncall.<name>]`
rotations, `escalate` steps, and who is on call at a moment.

An approver entry `oncall:<name>` is whoever `[oncall.<name>]` says is on call at the moment it is
asked (the card, each step, each click), so someone who went off call cannot decide any more. What a
waiting call's ladder does with the steps (its reminders and escalation, read from the whole policy)
closes the module: the ladder is the steps' one consumer, and the policy and its verdicts are only
its arguments, so they are imported for typing alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, time, timedelta
from typing import TYPE_CHECKING, Annotated, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictStr,
    field_validator,
    model_validator,
)

from ._fields import Approvals, ApproverId, Duration, unique

if TYPE_CHECKING:  # the ladder's functions take the whole policy and its verdicts, as values
    from ._gate import GateDecision, Requirement
    from ._policy import Policy
    from ._rules import Rule

__all__ = [
    "NOBODY_ON_CALL",
    "ONCALL_PREFIX",
    "EscalationStep",
    "Ladder",
    "OncallOverride",
    "OncallSpec",
    "Paged",
    "Paging",
    "Unpaged",
    "added_by",
    "check_ladder",
    "escalated",
    "grown",
    "ladder_for",
    "ladder_tick",
    "nobody_on_call",
    "oncall_name",
    "oncall_now",
    "resolve",
    "steps_due",
]

Paged = Callable[[str], "str | None"]
"""Who PagerDuty says is on call for a schedule id, as last fetched (`bot.pagerduty`);
None: nobody known (fail closed)."""
Unpaged = Callable[[str], str]
"""Why PagerDuty names nobody for a schedule id ("PagerDuty unreachable since 14:02 UTC")."""


class Paging(Protocol):
    """Who a paging service says is on call per schedule (`bot.pagerduty`), as a
    policy built with it (`Policy.paged_by`) asks it."""

    def known(self, schedule: str) -> str | None:
        """The on-call Slack user of `schedule` as last fetched; None: nobody known."""

    def why_nobody(self, schedule: str) -> str:
        """Why `known` names nobody for `schedule`, in the card's words."""


ONCALL_PREFIX = "oncall:"
NOBODY_ON_CALL = "(nobody on call)"
"""What a list of only on-call entries holds when nobody is on call: it matches no one (an
empty list would mean anyone in the channel)."""
_WEEKDAYS = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")
_HANDOFF = re.compile(r"(MON|TUE|WED|THU|FRI|SAT|SUN) ([01]\d|2[0-3]):([0-5]\d)")
_ROTATION_START = datetime(2024, 1, 1)  # a Monday: week 0 of every rotation
_FROZEN = ConfigDict(frozen=True, extra="forbid")


def oncall_name(entry: str) -> str | None:
    """`oncall:primary` -> "primary"; None for a user or group id."""
    return entry[len(ONCALL_PREFIX) :] if entry.startswith(ONCALL_PREFIX) else None


class EscalationStep(BaseModel):
    """One `escalate` entry: `after` the card was posted, add `approvers` (and the quorum)."""

    model_config = _FROZEN

    after: Duration
    approvers: Annotated[tuple[ApproverId, ...], AfterValidator(unique), Field(min_length=1)]
    required_approvals: Approvals | None = None


def check_ladder(
    steps: Sequence[EscalationStep], required: int, ttl: timedelta | None, key: str
) -> None:
    """Steps come in order of time, before the call expires, and never raise the quorum."""
    for index, step in enumerate(steps):
        where = f"{key}[{index}]"
        if index and step.after <= steps[index - 1].after:
            raise ValueError(f"{where}.after must be later than the step before it")
        if ttl is not None and step.after >= ttl:
            raise ValueError(f"{where}.after is not before the call expires (ttl)")
        if step.required_approvals is not None and step.required_approvals > required:
            raise ValueError(
                f"{where}.required_approvals = {step.required_approvals} is above the quorum "
                f"it escalates ({required}); a step may only lower it"
            )


def steps_due(steps: Sequence[EscalationStep], posted: datetime, now: datetime) -> int:
    """How many steps of the ladder have passed at `now` for a card posted at `posted`."""
    return sum(1 for step in steps if posted + step.after <= now)


def _zone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"{value!r} is not a time zone name (like 'Europe/Berlin')") from exc
    return value


class OncallOverride(BaseModel):
    """`user` is on call from `start` to `end` instead of the rotation."""

    model_config = _FROZEN

    user: ApproverId
    start: datetime
    end: datetime

    @model_validator(mode="after")
    def _ordered(self) -> OncallOverride:
        if self.end <= self.start:
            raise ValueError("an override's end must be after its start")
        return self


class OncallSpec(BaseModel):
    """`[oncall.<name>]`: a weekly rotation handed off at `handoff` in `timezone`."""

    model_config = _FROZEN

    rotation: Annotated[tuple[ApproverId, ...], AfterValidator(unique)] = ()
    handoff: StrictStr = "MON 09:00"
    timezone: Annotated[StrictStr, AfterValidator(_zone)] = "UTC"
    overrides: tuple[OncallOverride, ...] = ()
    pagerduty_schedule: StrictStr | None = None

    @field_validator("handoff")
    @classmethod
    def _handoff(cls, value: str) -> str:
        if not _HANDOFF.fullmatch(value.strip().upper()):
            raise ValueError(f'{value!r} is not a weekday and a time, like "MON 09:00"')
        return value.strip().upper()

    @model_validator(mode="after")
    def _source(self) -> OncallSpec:
        if self.pagerduty_schedule is not None:
            if self.rotation or self.overrides:
                raise ValueError(
                    "pagerduty_schedule says who is on call: remove `rotation` and `overrides`"
                )
            return self
        if not self.rotation:
            raise ValueError("needs a `rotation` or a `pagerduty_schedule`")
        for entry in self.rotation:
            if not entry.startswith(("U", "W")):
                raise ValueError(f"rotation lists {entry!r}: a rotation is of people (U… or W…)")
        return self

    def _overrides_at(self, now: datetime) -> str | None:
        zone = ZoneInfo(self.timezone)
        for override in self.overrides:
            start, end = (_aware(t, zone) for t in (override.start, override.end))
            if start <= now < end:
                return override.user
        return None

    def who(self, now: datetime, paged: Paged | None = None) -> str | None:
        """Who is on call at `now` (aware): PagerDuty's on-call as `paged` last knew it (None
        without it: nobody), else an override in force, else the rotation's turn."""
        if self.pagerduty_schedule is not None:
            return paged(self.pagerduty_schedule) if paged is not None else None
        overridden = self._overrides_at(now)
        if overridden is not None:
            return overridden
        found = _HANDOFF.fullmatch(self.handoff)
        assert found is not None
        day, hour, minute = _WEEKDAYS.index(found[1]), int(found[2]), int(found[3])
        zone = ZoneInfo(self.timezone)
        local = now.astimezone(zone)
        first = datetime.combine(
            (_ROTATION_START + timedelta(days=day)).date(), time(hour, minute), zone
        )
        # Whole weeks between the first handoff and `now`, counted on local dates and times so
        # a daylight-saving change moves nothing.
        days = (local.date() - first.date()).days
        weeks = days // 7
        if days % 7 == 0 and local.time() < first.time():
            weeks -= 1
        return self.rotation[weeks % len(self.rotation)]


def _aware(moment: datetime, zone: ZoneInfo) -> datetime:
    """An override's time: as written with its offset, else in the rotation's zone."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=zone)


def resolve(
    entries: Sequence[str],
    oncall: Mapping[str, OncallSpec],
    now: datetime | None,
    paged: Paged | None = None,
) -> tuple[str, ...]:
    """`entries` with each `oncall:<name>` replaced by whoever is on call (dropped when
    nobody is, or the name is unknown: fail closed)."""
    moment = now if now is not None else datetime.now(UTC)
    out: list[str] = []
    for entry in entries:
        name = oncall_name(entry)
        if name is None:
            out.append(entry)
            continue
        spec = oncall.get(name)
        person = spec.who(moment, paged) if spec is not None else None
        if person is not None:
            out.append(person)
    return tuple(dict.fromkeys(out))


def nobody_on_call(
    entries: Sequence[str],
    oncall: Mapping[str, OncallSpec],
    now: datetime | None,
    paged: Paged | None = None,
    unpaged: Unpaged | None = None,
) -> tuple[str, ...]:
    """For each `oncall:<name>` of `entries` that resolves to nobody, why, as the card shows
    it: "oncall:primary: nobody on call (PagerDuty unreachable since 14:02 UTC)". These
    entries match no Slack user, so they let nobody decide (fail closed)."""
    moment = now if now is not None else datetime.now(UTC)
    out: list[str] = []
    for entry in entries:
        name = oncall_name(entry)
        spec = oncall.get(name) if name is not None else None
        if name is None or (spec is not None and spec.who(moment, paged) is not None):
            continue
        if spec is None:
            why = "not in the policy"
        elif spec.pagerduty_schedule is None:
            why = "the rotation names nobody"
        elif paged is None:
            why = "PagerDuty is not set up"
        else:
            why = unpaged(spec.pagerduty_schedule) if unpaged is not None else "PagerDuty"
        out.append(f"{entry}: nobody on call ({why})")
    return tuple(dict.fromkeys(out))


def grown(base: Sequence[str], added: Sequence[str]) -> tuple[str, ...]:
    """The approver list after a step: `base` (empty: anyone, which stays anyone) plus `added`."""
    if not base:
        return ()
    return tuple(dict.fromkeys((*base, *added)))


# When nobody answers: reminders and the escalation ladder of a waiting call, under the whole
# policy.
#
# `escalate` (on `[defaults]` or a rule) lists steps, each `after` a time measured from the
# card's posting: the step's `approvers` join the call's (the set only grows) and its
# `required_approvals`, if given, becomes the quorum (never above the rule's). On-call entries are
# resolved at the moment asked (`resolve`, above).

_RULE_NAME = re.compile(r"tools\.(.+)\.rules\[(\d+)\]")


@dataclass(frozen=True, slots=True)
class Ladder:
    """What applies to one waiting call when nobody answers: its escalation steps and its
    reminders (`every` None: none)."""

    steps: tuple[EscalationStep, ...]
    every: timedelta | None
    most: int


def _rule_of(policy: Policy, name: str | None) -> Rule | None:
    found = _RULE_NAME.fullmatch(name or "")
    if found is None:
        return None
    section = policy.tools.get(found[1])
    index = int(found[2])
    return section.rules[index] if section is not None and index < len(section.rules) else None


def ladder_for(policy: Policy, decision: GateDecision) -> Ladder:
    """The deciding rule's `escalate` / `remind_every` / `remind_max`, else the defaults'."""
    rule = _rule_of(policy, decision.policy_rule)
    defaults = policy.defaults
    steps = rule.escalate if rule is not None and rule.escalate is not None else defaults.escalate
    every = rule.remind_every if rule is not None and rule.remind_every else defaults.remind_every
    most = rule.remind_max if rule is not None and rule.remind_max else defaults.remind_max
    return Ladder(steps, every, most)


def escalated(
    policy: Policy,
    channel: str | None,
    decision: GateDecision,
    step: int,
    now: datetime | None = None,
) -> GateDecision:
    """`decision` after the first `step` steps of its ladder: each requirement's approvers
    grown by theirs, its quorum the last step's that sets one (never above its own); with
    on-call names in the file, every `oncall:<name>` resolved at `now`, so whoever asks the
    decision later (a click) sees who is on call then. Step 0 without on-call names, or a
    call nothing may approve, is `decision` itself."""
    needs = decision.needs()
    if (step <= 0 and not policy.oncall) or not needs:
        return decision
    passed = ladder_for(policy, decision).steps[: max(step, 0)]
    added = resolve([a for s in passed for a in s.approvers], policy.oncall, now, policy.paged)
    quorum = next((s.required_approvals for s in reversed(passed) if s.required_approvals), None)
    grown_needs: list[Requirement] = []
    for need in needs:
        under = decision.under(need)
        spec = policy.approvers_for(channel, under, now)
        base = (*spec.users, *spec.groups)
        own = policy.required_approvals_for(channel, under)
        if not base:  # anyone in the channel: stays so, only the quorum may change
            grown_needs.append(replace(need, required_approvals=min(own, quorum or own)))
            continue
        grown_needs.append(
            replace(
                need,
                approvers=grown(base, added),
                required_approvals=min(own, quorum) if quorum is not None else own,
            )
        )
    first = grown_needs[0]
    return replace(
        decision,
        approvers=first.approvers,
        required_approvals=first.required_approvals,
        requirements=tuple(grown_needs) if decision.requirements else (),
    )


def added_by(policy: Policy, decision: GateDecision, step: int, now: datetime) -> tuple[str, ...]:
    """Who step number `step` (1-based) adds, resolved at `now`."""
    steps = ladder_for(policy, decision).steps
    if not 0 < step <= len(steps):
        return ()
    return resolve(steps[step - 1].approvers, policy.oncall, now, policy.paged)


def ladder_tick(policy: Policy, longest: float) -> float:
    """How often the expiry timer must look at waiting calls for their steps and reminders to
    come on time: a tenth of the shortest such time in the file (at least 0.2 s), or `longest`
    without any."""
    spans = [s.after for s in policy.defaults.escalate]
    spans += [policy.defaults.remind_every] if policy.defaults.remind_every else []
    for section in policy.tools.values():
        for rule in section.rules:
            spans += [s.after for s in rule.escalate or ()]
            spans += [rule.remind_every] if rule.remind_every else []
    if not spans:
        return longest
    return min(longest, max(0.2, min(spans).total_seconds() / 10))


def oncall_now(policy: Policy, now: datetime) -> tuple[tuple[str, str | None], ...]:
    """Each `[oncall.<name>]` of the file and who is on call for it at `now` (None: nobody)."""
    return tuple(
        (name, spec.who(now, policy.paged)) for name, spec in sorted(policy.oncall.items())
    )
