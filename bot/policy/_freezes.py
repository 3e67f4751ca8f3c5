"""`[[freezes]]`: change freezes, windows in which gated calls get no Approve.

A freeze is either recurring (`schedule`, a five-field cron expression in UTC, with `duration`:
each firing opens a window that long) or fixed (`start` and `end`, TOML offset date-times). It
may be limited to some `channels` and `tools`; `message` is shown on the cards it blocks and in
its announcements. Freezes are named `freezes[<index>]` (0-based, file order), like rules.
Ad hoc freezes (`/opsgate freeze`) live in the store; both become an `ActiveFreeze`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated

from cronsim import CronSim, CronSimError
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictStr, model_validator

from bot.words import format_duration

from ._fields import ChannelId, Duration, ToolName, unique

__all__ = ["ActiveFreeze", "FreezeSpec", "freeze_name"]

_LONGEST = timedelta(days=31)
"""The longest window a schedule may open: longer is a typo (a fixed `start`/`end` is not
limited)."""


def _cron(value: str) -> str:
    fields = value.split()
    if len(fields) != 5:
        raise ValueError(
            f"{value!r} is not a five-field cron expression (minute hour day month weekday, "
            'in UTC, e.g. "0 17 * * 5" for Fridays at 17:00)'
        )
    try:
        CronSim(value, datetime(2000, 1, 1))
    except CronSimError as exc:
        raise ValueError(f"{value!r} is not a valid cron expression: {exc}") from None
    return " ".join(fields)


def _aware(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError(
            f"{value.isoformat()} has no UTC offset; write an offset date-time, "
            "like 2026-12-05T17:00:00Z"
        )
    return value


Cron = Annotated[StrictStr, AfterValidator(_cron)]
Moment = Annotated[datetime, AfterValidator(_aware)]


def freeze_name(index: int) -> str:
    return f"freezes[{index}]"


class FreezeSpec(BaseModel):
    """One `[[freezes]]` entry (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schedule: Cron | None = None
    duration: Duration | None = None
    start: Moment | None = None
    end: Moment | None = None
    channels: Annotated[tuple[ChannelId, ...], AfterValidator(unique)] | None = None
    """Where it applies (absent: every channel)."""
    tools: Annotated[tuple[ToolName, ...], AfterValidator(unique)] | None = None
    """Which tools' calls it blocks (absent: every gated call)."""
    message: Annotated[StrictStr, Field(min_length=1, max_length=500)] | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> FreezeSpec:
        fixed = self.start is not None or self.end is not None
        if self.schedule is not None:
            if fixed:
                raise ValueError(
                    "a freeze has `schedule` + `duration` or `start` + `end`, not both"
                )
            if self.duration is None:
                raise ValueError("a `schedule` needs a `duration` (how long each window lasts)")
            if self.duration > _LONGEST:
                raise ValueError("duration: a scheduled window lasts at most 31 days")
            return self
        if self.duration is not None:
            raise ValueError("`duration` goes with `schedule`; a fixed freeze has `start` + `end`")
        if self.start is None or self.end is None:
            raise ValueError("a freeze needs `schedule` + `duration`, or both `start` and `end`")
        if self.end <= self.start:
            raise ValueError("`end` must be after `start`")
        return self

    def window_at(self, now: datetime) -> tuple[datetime, datetime] | None:
        """The window (start, end) that holds `now`, or the latest one that began before it
        (ended already), or None when none began yet."""
        if self.schedule is None:
            assert self.start is not None and self.end is not None
            return (self.start, self.end) if self.start <= now else None
        assert self.duration is not None
        # Reverse iteration excludes its starting moment: start just after `now`.
        begun = next(CronSim(self.schedule, now + timedelta(seconds=1), reverse=True), None)
        return None if begun is None else (begun, begun + self.duration)

    def words(self) -> str:
        """When it applies, in words (for help and the Home tab)."""
        if self.schedule is not None and self.duration is not None:
            when = f"cron {self.schedule!r} (UTC) for {format_duration(self.duration)}"
        else:
            assert self.start is not None and self.end is not None
            when = f"{self.start.isoformat()} to {self.end.isoformat()}"
        return when


@dataclass(frozen=True, slots=True)
class ActiveFreeze:
    """A freeze in force: from the policy (`freezes[<i>]`) or ad hoc (`adhoc:<id>`)."""

    key: str
    """`freezes[<i>]` or `adhoc:<id>`: names it in the audit and the store's claims."""
    label: str
    """How the card and the announcements name it."""
    started_at: datetime
    until: datetime
    message: str | None = None
    channels: tuple[str, ...] | None = None
    tools: tuple[str, ...] | None = None
    started_by: str | None = None
    """The freeze admin who started an ad hoc freeze."""

    @property
    def window_key(self) -> str:
        """One window of one freeze (a schedule opens many): what announcements claim."""
        return f"{self.key}@{self.started_at.isoformat()}"

    def covers(self, channel: str | None, tool: str | None) -> bool:
        if self.channels is not None and channel not in self.channels:
            return False
        return self.tools is None or tool is None or tool in self.tools
