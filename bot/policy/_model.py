"""The sections of the policy file as frozen pydantic models (`extra="forbid"`: a typo stops the
bot). `Policy` itself, the whole file, is in `_policy`.

Beside the tools and channels: who may decide in one channel as the file lists it
(`ApproverSpec`; the rules that use it, and the user-group lookups, live in `bot.approvals`);
`[audit]`, where the audit log is exported to (`bot/observability/audit_export.py`); `[shadow]`,
a second policy judged beside the live one, its verdicts only counted and audited; `[mcp]`,
who reviews a changed MCP tool's definition, and where; and `[[freezes]]`, change freezes (their
section is at the end, with `ActiveFreeze`, what a freeze from the file or the store becomes).

The audit webhook receives every audit row, untrusted text included, so it must be https, or
plain http only to an address that cannot leave the host or the private network (a loopback or
private IP literal, or `localhost`): a typo must not send the log across the internet in the
clear. The shadow's `policy` names a file (relative to the policy file's directory);
`OPSGATE_SHADOW_POLICY` overrides it. A change can so run beside the current policy for a week
before it is switched on, with `opsgate_shadow_differences_total` and the `shadow_differs` audit
rows saying where it would have decided otherwise.

`[plane]` and `[plane.clients.<name>]`: which outside automation may ask for approvals.

A client is known by the SHA-256 of its bearer token (the file never holds the token), and may
ask only for its `tools`, with cards only in its `channels`. No client: the plane is off.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from cronsim import CronSim, CronSimError
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    model_validator,
)

from bot.words import format_duration

from ._fields import (
    DEFAULT_REJECT_REASONS,
    MAX_SUGGESTED_PROMPTS,
    AllowWindow,
    Approvals,
    ApproverId,
    ArgumentRule,
    BotId,
    ChannelId,
    Concurrency,
    Directory,
    Duration,
    Instructions,
    OsUser,
    OutputLimit,
    PreviewArgs,
    RejectReason,
    SuggestedPrompt,
    ToolName,
    Trigger,
    check_reachable,
    check_tool_preview,
    unique,
)
from ._oncall import EscalationStep, check_ladder
from ._rules import Rule

__all__ = [
    "NO_OVERRIDE",
    "RUN_COMMAND_ONLY",
    "ActiveFreeze",
    "ApproverSpec",
    "ArgumentRule",
    "AuditPolicy",
    "ChannelPolicy",
    "Defaults",
    "FreezeSpec",
    "McpReviewSection",
    "Model",
    "PlaneClient",
    "PlanePolicy",
    "Rule",
    "ShadowSection",
    "ToolPolicy",
    "check_reachable",
    "freeze_name",
    "webhook_url",
]


class Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolPolicy(Model):
    """`[tools.<name>]`: when calls of one tool wait for a human.

    `approval`: "always", "never" (the operator's explicit choice: never asks), "forbidden"
    (never runs) or "rules" (the `[[tools.<name>.rules]]` decide, see `bot.policy._rules`).
    `[tools.run_command]` alone also takes `workdir`, `timeout`, `output_limit`, `run_as` and
    `env` (the policy refuses them for other tools); `approval` stays "always" unless the
    section says so.
    """

    approval: Literal["always", "never", "rules", "forbidden"] = "always"
    rules: tuple[Rule, ...] = ()
    default: Literal["always", "never"] | None = None
    """With `approval = "rules"`: what a call no rule matches gets. run_command: "always"
    unless the section says `default = "never"` (a program no rule names is unknown); other
    tools: "never" (their rules name the calls that ask)."""
    workdir: Directory | None = None
    """run_command: where commands run (an existing directory); default: where the bot started."""
    timeout: Duration | None = None
    """run_command: the longest a command may run, e.g. "2m" (the model may ask for less);
    default 60 seconds."""
    output_limit: OutputLimit | None = None
    """run_command: characters kept of each of stdout and stderr; default 20,000."""
    run_as: OsUser | None = None
    """run_command: the OS user commands run as (recommended: one that cannot read the bot's
    files); default: the bot's own user."""
    env: dict[StrictStr, StrictStr] | None = None
    """run_command: variables its commands and its rules' previews get besides the basics
    (`PATH`, `HOME`, `LANG`, `LC_*`, `TZ`, `TERM`; nothing else of the bot's environment);
    `${VAR}` in a value is taken from the bot's environment at start-up."""
    allow_edit: StrictBool = True
    """Cards of this tool offer "Edit": approve the call with arguments a human changed."""
    allow_for: AllowWindow | None = None
    """Cards of this tool offer "Allow for <allow_for>": approve, and let the same call shape
    run without a card in that channel for that long (absent: no such button)."""
    break_glass: StrictBool = False
    """During a change freeze, this tool's cards offer "Break glass" (its rules may too)."""
    preview: ToolName | None = None
    """A custom tool's (or http_request's) preview: a read-only tool called, without approval,
    before the card is posted; its output is on the card and bound to Approve (run_command's
    previews are its rules' `preview`)."""
    preview_args: PreviewArgs | None = None
    """The preview tool's arguments, `{name}` filled from the call's (`_fields`);
    absent: none."""
    preview_ttl: Duration | None = None
    """How old the preview may be when the last approval arrives (default 10m)."""

    @model_validator(mode="after")
    def _rules_fit_approval(self) -> ToolPolicy:
        check_tool_preview(self.preview, self.preview_args, self.preview_ttl, self.approval)
        if self.preview is not None and self.allow_for is not None:
            raise ValueError(
                'a tool with a `preview` offers no "Allow for" (an allowed call would run '
                "without its preview): remove allow_for"
            )
        if self.approval == "rules" and not self.rules:
            raise ValueError('approval = "rules" needs at least one [[tools.<name>.rules]] entry')
        if self.approval != "rules" and self.rules:
            raise ValueError(
                f'rules are only used with approval = "rules", but approval is {self.approval!r}'
            )
        if self.approval != "rules" and self.default is not None:
            raise ValueError(
                f'default is what a call no rule matches gets, so it needs approval = "rules", '
                f"but approval is {self.approval!r}"
            )
        return self

    def unmatched(self, tool: str) -> Literal["always", "never"]:
        """What a call of `tool` that no rule matches gets (see `default`)."""
        if self.default is not None:
            return self.default
        return "always" if tool == "run_command" else "never"


class Defaults(Model):
    """`[defaults]`: who approves, how many, how long; where the bot acts; extra tools."""

    approvers: tuple[ApproverId, ...] = ()
    required_approvals: Approvals = 1
    allow_self_approval: StrictBool = False
    ttl: Duration = timedelta(hours=1)
    remind_before: Duration | None = None
    remind_every: Duration | None = None
    """Each approver who has not decided gets a direct message this often (at most
    `remind_max` times) while a call waits."""
    remind_max: Approvals = 3
    escalate: tuple[EscalationStep, ...] = ()
    """The escalation ladder of calls whose rule has none (`_oncall.ladder_for`)."""
    channels: tuple[ChannelId, ...] | None = None
    tools_modules: tuple[StrictStr, ...] = ()
    concurrency: Concurrency = 2
    """Runs actively running at once per channel (paused runs waiting for approval don't count);
    more messages wait in the queue."""
    reject_reasons: Annotated[tuple[RejectReason, ...], AfterValidator(unique)] = (
        DEFAULT_REJECT_REASONS
    )
    """The reasons the reject form offers to pick from (free text works too)."""
    suggested_prompts: Annotated[
        tuple[SuggestedPrompt, ...],
        AfterValidator(unique),
        Field(max_length=MAX_SUGGESTED_PROMPTS),
    ] = ()
    """What the AI-app container offers to ask when someone opens a conversation with the bot
    (at most four)."""
    freeze_admins: Annotated[tuple[ApproverId, ...], AfterValidator(unique)] = ()
    """Who may start and end ad hoc freezes (`/opsgate freeze`, `/opsgate unfreeze`)."""
    break_glass_approvers: Annotated[tuple[ApproverId, ...], AfterValidator(unique)] = ()
    """Who may break glass on a card a freeze blocks (with a rule's own `approvers`)."""

    @model_validator(mode="after")
    def _consistent(self) -> Defaults:
        if self.remind_before is not None and self.remind_before >= self.ttl:
            raise ValueError(
                f"remind_before ({format_duration(self.remind_before)}) must be shorter than "
                f"ttl ({format_duration(self.ttl)})"
            )
        check_reachable(self.approvers, self.required_approvals, "approvers")
        check_ladder(self.escalate, self.required_approvals, self.ttl, "escalate")
        return self


class ChannelPolicy(Model):
    """`[channels_policy.<channel id>]`: how the bot works in one channel.

    `trigger`: "mention" (default) or "every_message" (each top-level message starts a run in
    its thread). `allowed_bots`: bot (B…) or app (A…) ids whose messages may start runs there
    (other bots are always ignored). `instructions`: added to the system prompt there. `tools`:
    the tools offered there (all when absent). `approvers`, `required_approvals`: override the
    defaults. `concurrency`: runs at once there (defaults.concurrency when absent).
    """

    trigger: Trigger = "mention"
    allowed_bots: Annotated[tuple[BotId, ...], AfterValidator(unique)] = ()
    instructions: Instructions | None = None
    tools: Annotated[tuple[ToolName, ...], AfterValidator(unique)] | None = None
    approvers: tuple[ApproverId, ...] | None = None
    required_approvals: Approvals | None = None
    concurrency: Concurrency | None = None


NO_OVERRIDE = ChannelPolicy()
"""The section of a channel the file does not mention: every key at its default."""

RUN_COMMAND_ONLY = ("workdir", "timeout", "output_limit", "run_as", "env")
"""Keys of `[tools.run_command]` that no other tool's section takes."""


@dataclass(frozen=True, slots=True)
class ApproverSpec:
    """Who may decide in one channel. Neither users nor groups means anyone in the channel."""

    users: tuple[str, ...]
    groups: tuple[str, ...]
    source: str
    """Where this list comes from: "defaults.approvers" or "channels_policy.<id>.approvers"."""

    @property
    def anyone(self) -> bool:
        return not self.users and not self.groups


def webhook_url(url: str) -> str:
    """`url` if it is https, or http to a loopback or private address; else ValueError."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme not in ("https", "http") or not host:
        raise ValueError(f"the audit webhook must be an https:// URL, not {url!r}")
    if parts.username or parts.password:
        raise ValueError("the audit webhook URL must not hold credentials (they would be logged)")
    if parts.scheme == "http" and not _local(host):
        raise ValueError(
            f"the audit webhook {host!r} is plain http: use https, or http only to a loopback "
            "or private address"
        )
    return url


def _local(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private


class AuditPolicy(Model):
    """`webhook`: the collector each batch of rows is POSTed to (a JSON array, in seq order,
    at least once). `batch`: rows per delivery at most. `retry_max`: the longest wait between
    retries (the wait doubles from one second up to it). `unready_after`: failed deliveries in
    a row after which `/readyz` reports the export."""

    webhook: Annotated[StrictStr, AfterValidator(webhook_url)] | None = None
    batch: Annotated[StrictInt, Field(ge=1, le=10_000)] = 100
    retry_max: Duration = timedelta(minutes=1)
    unready_after: Annotated[StrictInt, Field(ge=1)] = 5


class ShadowSection(Model):
    policy: StrictStr | None = Field(default=None, min_length=1)

    def path(self, source: str) -> Path | None:
        """The shadow policy's file; a relative one is found beside `source`, the policy file."""
        if self.policy is None:
            return None
        path = Path(self.policy)
        base = Path(source).parent if Path(source).is_file() else Path.cwd()
        return path if path.is_absolute() else base / path


class McpReviewSection(Model):
    """`[mcp]`: where a changed MCP tool's review card goes (`review_channel`; without it the
    change is only logged) and who may accept the new definition (`mcp_admins`: user and
    user-group ids)."""

    review_channel: ChannelId | None = None
    mcp_admins: tuple[ApproverId, ...] = ()


def _sha256_hex(value: str) -> str:
    text = value.strip().lower()
    if len(text) != 64 or any(c not in "0123456789abcdef" for c in text):
        raise ValueError("must be the SHA-256 of the token in hex (64 characters)")
    return text


ClientName = Annotated[StrictStr, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]


class PlaneClient(Model):
    """`[plane.clients.<name>]`: one outside caller."""

    token_sha256: Annotated[StrictStr, AfterValidator(_sha256_hex)]
    channels: tuple[ChannelId, ...] = ()
    """Where its cards may go; the first is its default (none: `[plane] channel` only)."""
    tools: tuple[ToolName, ...] = ("run_command",)
    """What it may ask for."""
    requester: ApproverId | None = None
    """The Slack user shown as requester when a call names none (self-approval is judged
    against it)."""


class PlanePolicy(Model):
    """`[plane]`: the approval plane for other automation."""

    channel: ChannelId | None = None
    """Where cards go when neither the call nor its client names a channel."""
    receipt_ttl: Duration = timedelta(minutes=15)
    """How long a receipt stays valid after the decision."""
    clients: dict[ClientName, PlaneClient] = Field(default_factory=dict)

    @property
    def on(self) -> bool:
        """Whether any client may ask (else the API answers 404)."""
        return bool(self.clients)

    def client_for(self, token: str) -> str | None:
        """The name of the client whose token this is; every client is compared, each in
        constant time, so the answer's timing does not say which digest came close."""
        digest = hashlib.sha256(token.encode()).hexdigest()
        found: str | None = None
        for name, client in self.clients.items():
            if hmac.compare_digest(digest, client.token_sha256):
                found = name
        return found


# `[[freezes]]`: change freezes, windows in which gated calls get no Approve.
#
# A freeze is either recurring (`schedule`, a five-field cron expression in UTC, with `duration`:
# each firing opens a window that long) or fixed (`start` and `end`, TOML offset date-times). It
# may be limited to some `channels` and `tools`; `message` is shown on the cards it blocks and in
# its announcements. Freezes are named `freezes[<index>]` (0-based, file order), like rules.
# Ad hoc freezes (`/opsgate freeze`) live in the store; both become an `ActiveFreeze`.

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
