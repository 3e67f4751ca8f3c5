"""The approval policy: which tool calls wait for a human, who may decide, and for how long.

It is read once at start-up from a TOML file (`OPSGATE_POLICY`) and validated strictly: a typo in
a safety setting must stop the bot with a message naming the file and the key, not quietly fall
back to a default. Without a file, `Policy.default()` applies: `run_command` always asks, anyone
but the requester may approve, one approval, one hour to decide.

`Policy.gate` is an agent_core `ApprovalGate`; `check_approver` answers "may this person decide
this call?" and says why not; `GroupResolver` looks up Slack user-group members, with a cache.

`[tools.run_command]` also says where commands run (`workdir`), for how long at most
(`timeout`) and how much of their output is kept (`output_limit`).

Channels can be set up for ops automation in `[channels_policy.<channel id>]`: what starts a
run there (`trigger`), which integrations' messages may (`allowed_bots`), extra `instructions`
for the model, the `tools` offered, who approves, and how many runs go at once (`concurrency`).
"""

from __future__ import annotations

import difflib
import logging
import re
import time
import tomllib
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    model_validator,
)

from agent_core import Tool, ToolCall, canonical_arguments
from bot._duration import format_duration, parse_duration
from bot.errors import BotError

__all__ = [
    "ApproverCheck",
    "ApproverSpec",
    "ArgumentRule",
    "ChannelPolicy",
    "Defaults",
    "GateDecision",
    "GroupResolver",
    "Policy",
    "PolicyError",
    "ToolPolicy",
    "Trigger",
    "check_approver",
]

logger = logging.getLogger("bot.policy")

_USER_ID = re.compile(r"[UW][A-Z0-9]{2,}")
_GROUP_ID = re.compile(r"S[A-Z0-9]{2,}")
_CHANNEL_ID = re.compile(r"[CGD][A-Z0-9]{2,}")
_BOT_ID = re.compile(r"[BA][A-Z0-9]{2,}")
_BUILT_IN_SOURCE = "(built-in default policy)"


class PolicyError(BotError):
    """The policy file is unusable. The message names the file and what is wrong with it."""


# --- field types -------------------------------------------------------------------------------


def _duration(value: Any) -> Any:
    if isinstance(value, timedelta):
        return value
    if not isinstance(value, str):
        raise ValueError(f'durations are written as text, like "90s", "15m", "2h", not {value!r}')
    parsed = parse_duration(value)
    if parsed <= timedelta(0):
        raise ValueError(f"{value!r} is zero; a duration must be longer than that")
    return parsed


def _approver_id(value: str) -> str:
    if not (_USER_ID.fullmatch(value) or _GROUP_ID.fullmatch(value)):
        raise ValueError(
            f"{value!r} is not a Slack user id (U… or W…) or user-group id (S…); "
            "copy the id from the person's or the group's profile"
        )
    return value


def _channel_id(value: str) -> str:
    if not _CHANNEL_ID.fullmatch(value):
        raise ValueError(f"{value!r} is not a Slack channel id (C…, G… or D…)")
    return value


def _bot_id(value: str) -> str:
    if not _BOT_ID.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a Slack bot id (B…) or app id (A…); the bot id is the `bot_id` "
            "of the integration's messages, the app id is on the app's settings page"
        )
    return value


def _directory(value: Any) -> Any:
    if not isinstance(value, (str, Path)) or not str(value).strip():
        raise ValueError(f'a directory is a path written as text, like "/srv/ops", not {value!r}')
    path = Path(value).expanduser()
    value = str(value)
    if not path.exists():
        raise ValueError(f"{value!r} does not exist; create it or name an existing directory")
    if not path.is_dir():
        raise ValueError(f"{value!r} is not a directory")
    return path.absolute()


def _text(value: str) -> str:
    if not value.strip():
        raise ValueError("is empty; remove the key or write the text")
    return value.strip()


def _unique(values: tuple[str, ...]) -> tuple[str, ...]:
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        raise ValueError(f"lists {', '.join(map(repr, repeated))} more than once")
    return values


def _regex(value: Any) -> Any:
    if isinstance(value, re.Pattern):
        return value
    if not isinstance(value, str):
        raise ValueError(f"a pattern is a regular expression written as text, not {value!r}")
    try:
        return re.compile(value)
    except re.error as exc:
        raise ValueError(f"{value!r} is not a valid regular expression: {exc}") from None


Duration = Annotated[timedelta, BeforeValidator(_duration)]
Directory = Annotated[Path, BeforeValidator(_directory)]
"""An existing directory; relative paths are from the directory the bot starts in."""
OutputLimit = Annotated[StrictInt, Field(gt=0)]
ApproverId = Annotated[StrictStr, AfterValidator(_approver_id)]
ChannelId = Annotated[StrictStr, AfterValidator(_channel_id)]
Regex = Annotated[re.Pattern[str], BeforeValidator(_regex)]
BotId = Annotated[StrictStr, AfterValidator(_bot_id)]
Approvals = Annotated[StrictInt, Field(ge=1)]
Concurrency = Annotated[StrictInt, Field(ge=1, le=1000)]
ToolName = Annotated[StrictStr, Field(min_length=1)]
Instructions = Annotated[StrictStr, AfterValidator(_text), Field(max_length=8000)]
Trigger = Literal["mention", "every_message"]
"""What starts a run in a channel: a mention of the bot, or every top-level message."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --- the file's sections -----------------------------------------------------------------------


class ArgumentRule(_Model):
    """`[[tools.<name>.rules]]`: approval is needed when `argument` matches `pattern` (re.search).

    Non-text values are matched in their canonical JSON spelling. A missing argument takes the
    default from the tool's schema when the tool is known, and otherwise matches nothing.
    """

    argument: Annotated[StrictStr, Field(min_length=1)]
    pattern: Regex
    name: StrictStr | None = None
    """A label for the audit log; without one the rule is named by its place and pattern."""

    def matches(self, arguments: Mapping[str, Any], defaults: Mapping[str, Any]) -> bool:
        if self.argument in arguments:
            value = arguments[self.argument]
        elif self.argument in defaults:
            value = defaults[self.argument]
        else:
            return False
        text = value if isinstance(value, str) else canonical_arguments(value)
        return self.pattern.search(text) is not None


class ToolPolicy(_Model):
    """`[tools.<name>]`: when calls of one tool wait for a human.

    `[tools.run_command]` alone also takes `workdir`, `timeout` and `output_limit` (the policy
    refuses them for other tools); `approval` stays "always" unless the section says otherwise.
    """

    approval: Literal["always", "never", "rules"] = "always"
    rules: tuple[ArgumentRule, ...] = ()
    workdir: Directory | None = None
    """run_command: where commands run (an existing directory); default: where the bot started."""
    timeout: Duration | None = None
    """run_command: the longest a command may run, e.g. "2m" (the model may ask for less);
    default 60 seconds."""
    output_limit: OutputLimit | None = None
    """run_command: characters kept of each of stdout and stderr; default 20,000."""

    @model_validator(mode="after")
    def _rules_fit_approval(self) -> ToolPolicy:
        if self.approval == "rules" and not self.rules:
            raise ValueError('approval = "rules" needs at least one [[tools.<name>.rules]] entry')
        if self.approval != "rules" and self.rules:
            raise ValueError(
                f'rules are only used with approval = "rules", but approval is {self.approval!r}'
            )
        return self


class Defaults(_Model):
    """`[defaults]`: who approves, how many, how long; where the bot acts; extra tools."""

    approvers: tuple[ApproverId, ...] = ()
    required_approvals: Approvals = 1
    allow_self_approval: StrictBool = False
    ttl: Duration = timedelta(hours=1)
    remind_before: Duration | None = None
    channels: tuple[ChannelId, ...] | None = None
    tools_modules: tuple[StrictStr, ...] = ()
    concurrency: Concurrency = 2
    """Runs actively running at once per channel (paused runs waiting for approval don't count);
    more messages wait in the queue."""

    @model_validator(mode="after")
    def _consistent(self) -> Defaults:
        if self.remind_before is not None and self.remind_before >= self.ttl:
            raise ValueError(
                f"remind_before ({format_duration(self.remind_before)}) must be shorter than "
                f"ttl ({format_duration(self.ttl)})"
            )
        _check_reachable(self.approvers, self.required_approvals, "approvers")
        return self


class ChannelPolicy(_Model):
    """`[channels_policy.<channel id>]`: how the bot works in one channel.

    `trigger`: "mention" (default) or "every_message" (each top-level message starts a run in
    its thread). `allowed_bots`: bot (B…) or app (A…) ids whose messages may start runs there
    (other bots are always ignored). `instructions`: added to the system prompt there. `tools`:
    the tools offered there (all when absent). `approvers`, `required_approvals`: override the
    defaults. `concurrency`: runs at once there (defaults.concurrency when absent).
    """

    trigger: Trigger = "mention"
    allowed_bots: Annotated[tuple[BotId, ...], AfterValidator(_unique)] = ()
    instructions: Instructions | None = None
    tools: Annotated[tuple[ToolName, ...], AfterValidator(_unique)] | None = None
    approvers: tuple[ApproverId, ...] | None = None
    required_approvals: Approvals | None = None
    concurrency: Concurrency | None = None


_NO_OVERRIDE = ChannelPolicy()

_RUN_COMMAND_ONLY = ("workdir", "timeout", "output_limit")
"""Keys of `[tools.run_command]` that no other tool's section takes."""


def _check_reachable(approvers: Sequence[str], required: int, key: str) -> None:
    """N approvals from fewer than N listed people (and no group) can never happen."""
    has_group = any(_GROUP_ID.fullmatch(a) for a in approvers)
    if approvers and not has_group and required > len(approvers):
        raise ValueError(
            f"required_approvals = {required} but {key} lists only {len(approvers)} "
            "person(s) and no user group"
        )


# --- answers -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GateDecision:
    """Whether a call waits for a human, and the policy rule that said so (for the audit log)."""

    requires_approval: bool
    rule: str


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

    def mention_text(self) -> str:
        """Slack mrkdwn naming the approvers, e.g. "<@U1>, <@U2> or members of <!subteam^S1>"."""
        if self.anyone:
            return "anyone in the channel"
        names = [f"<@{u}>" for u in self.users]
        if self.groups:
            names.append("members of " + ", ".join(f"<!subteam^{g}>" for g in self.groups))
        return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


@dataclass(frozen=True, slots=True)
class ApproverCheck:
    """The answer of `check_approver`; `why` is the reply for a refused user (Slack mrkdwn)."""

    allowed: bool
    why: str | None
    rule: str


# --- the policy --------------------------------------------------------------------------------


def _built_in_tools() -> Mapping[str, ToolPolicy]:
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


class Policy(_Model):
    """The whole policy file. Build it with `Policy.load(path)` or `Policy.default()`."""

    defaults: Defaults = Defaults()
    tools: dict[Annotated[StrictStr, Field(min_length=1)], ToolPolicy] = {}
    channels_policy: dict[ChannelId, ChannelPolicy] = {}

    _source: str = PrivateAttr(default=_BUILT_IN_SOURCE)
    _built_in: Mapping[str, ToolPolicy] = PrivateAttr(default_factory=_built_in_tools)

    @model_validator(mode="before")
    @classmethod
    def _run_command_keys_stay_there(cls, data: Any) -> Any:
        """Checked on the raw file, so that a misplaced `workdir` is reported as misplaced
        rather than as, say, a directory that does not exist."""
        tools = data.get("tools") if isinstance(data, dict) else None
        if not isinstance(tools, dict):
            return data
        for name, section in tools.items():
            if name == "run_command" or not isinstance(section, dict):
                continue
            misplaced = [key for key in _RUN_COMMAND_ONLY if key in section]
            if misplaced:
                raise ValueError(
                    f"unknown key {f'tools.{name}.{misplaced[0]}'!r}: "
                    f"{', '.join(_RUN_COMMAND_ONLY)} are settings of [tools.run_command] only"
                )
        return data

    @model_validator(mode="after")
    def _channels_consistent(self) -> Policy:
        allowed = self.defaults.channels
        for channel, override in self.channels_policy.items():
            if allowed is not None and channel not in allowed:
                raise ValueError(
                    f"channels_policy.{channel} is for a channel that defaults.channels does not "
                    "list, so the bot never acts there"
                )
            approvers = (
                override.approvers if override.approvers is not None else self.defaults.approvers
            )
            required = override.required_approvals or self.defaults.required_approvals
            _check_reachable(approvers, required, f"channels_policy.{channel}.approvers")
        return self

    # construction

    @classmethod
    def default(cls) -> Policy:
        """The policy without a file: risky tools ask, anyone but the requester approves."""
        return cls()

    @classmethod
    def load(cls, path: Path, *, known_tools: Collection[str] | None = None) -> Policy:
        """Read and validate a policy file; raise `PolicyError` naming the file and the problem.

        With `known_tools`, a `[tools.<name>]` for a tool that does not exist is an error too
        (or call `check_tools` once the custom tools are loaded).
        """
        source = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise PolicyError(f"policy file {source}: not found") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise PolicyError(f"policy file {source}: cannot be read: {exc}") from None
        return cls.from_toml(text, source=source, known_tools=known_tools)

    @classmethod
    def from_toml(
        cls,
        text: str,
        *,
        source: str = "<policy>",
        known_tools: Collection[str] | None = None,
    ) -> Policy:
        """Like `load`, from text; `source` names it in error messages."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise PolicyError(f"policy file {source}: invalid TOML: {exc}") from None
        try:
            policy = cls.model_validate(data)
        except ValidationError as exc:
            raise PolicyError(_explain(source, exc)) from None
        policy._source = source
        if known_tools is not None:
            policy.check_tools(known_tools)
        return policy

    def check_tools(self, known_tools: Collection[str]) -> None:
        """Raise `PolicyError` if the file configures or offers a tool that the bot lacks."""
        known = sorted(set(known_tools))
        places = [(f"[tools.{name}]", name) for name in self.tools]
        for channel, override in self.channels_policy.items():
            places += [(f"channels_policy.{channel}.tools", name) for name in override.tools or ()]
        for where, name in places:
            if name not in known:
                hint = _did_you_mean(name, known)
                raise PolicyError(
                    f"policy file {self._source}: {where}: unknown tool {name!r}{hint}; "
                    f"known tools: {', '.join(known) or 'none'}"
                )

    # settings

    @property
    def source(self) -> str:
        """The file this policy came from, for messages."""
        return self._source

    @property
    def ttl(self) -> timedelta:
        return self.defaults.ttl

    @property
    def remind_before(self) -> timedelta | None:
        return self.defaults.remind_before

    @property
    def allow_self_approval(self) -> bool:
        return self.defaults.allow_self_approval

    @property
    def tools_modules(self) -> tuple[str, ...]:
        return self.defaults.tools_modules

    def allows_channel(self, channel: str) -> bool:
        """Whether the bot acts in `channel` (every channel when the file lists none)."""
        return self.defaults.channels is None or channel in self.defaults.channels

    def approvers_for(self, channel: str | None) -> ApproverSpec:
        override = self.channels_policy.get(channel) if channel is not None else None
        if override is not None and override.approvers is not None:
            approvers, source = override.approvers, f"channels_policy.{channel}.approvers"
        else:
            approvers, source = self.defaults.approvers, "defaults.approvers"
        return ApproverSpec(
            users=tuple(a for a in approvers if not _GROUP_ID.fullmatch(a)),
            groups=tuple(a for a in approvers if _GROUP_ID.fullmatch(a)),
            source=source,
        )

    def required_approvals_for(self, channel: str | None) -> int:
        override = self.channels_policy.get(channel) if channel is not None else None
        if override is not None and override.required_approvals is not None:
            return override.required_approvals
        return self.defaults.required_approvals

    def channel(self, channel: str | None) -> ChannelPolicy:
        """The channel's own section, or an empty one (every key at its default)."""
        found = self.channels_policy.get(channel) if channel is not None else None
        return found if found is not None else _NO_OVERRIDE

    def trigger_for(self, channel: str | None) -> Trigger:
        return self.channel(channel).trigger

    def allows_bot(self, channel: str | None, *ids: str | None) -> bool:
        """Whether a message from a bot with any of these bot/app ids may start runs here."""
        allowed = self.channel(channel).allowed_bots
        return any(i in allowed for i in ids if i)

    def instructions_for(self, channel: str | None) -> str | None:
        return self.channel(channel).instructions

    def tools_for(self, channel: str | None) -> tuple[str, ...] | None:
        """The names of the tools offered in the channel; None means every tool."""
        return self.channel(channel).tools

    def concurrency_for(self, channel: str | None) -> int:
        own = self.channel(channel).concurrency
        return own if own is not None else self.defaults.concurrency

    def approval_summary(self, tool: Tool | str) -> str:
        """When calls of a tool wait for a human, in a few words (for `/opsgate help`)."""
        name = tool if isinstance(tool, str) else tool.name
        config = self.tools.get(name) or self._built_in.get(name)
        if config is None:
            risky = True if isinstance(tool, str) else tool.requires_approval()
            return "asks for approval" if risky else "runs without approval"
        if config.approval == "always":
            return "asks for approval"
        if config.approval == "never":
            return "runs without approval"
        labels = [r.name or f"{r.argument} matches /{r.pattern.pattern}/" for r in config.rules]
        return "asks for approval for " + "; ".join(labels)

    # the gate

    def decide(self, tool: Tool | str, call: ToolCall) -> GateDecision:
        """Whether `call` waits for a human, and which rule decided.

        Order: the file's `[tools.<name>]`, then the built-in default for built-in tools, then
        the tool's own `requires_approval()` (only known when `tool` is a `Tool`; a bare name
        of an unconfigured tool is treated as risky).
        """
        name = tool if isinstance(tool, str) else tool.name
        if name in self.tools:
            where, config = f"tools.{name}", self.tools[name]
        elif name in self._built_in:
            where, config = f"built-in default for {name}", self._built_in[name]
        else:
            risky = True if isinstance(tool, str) else tool.requires_approval()
            return GateDecision(
                risky,
                f"no [tools.{name}] in the policy: the tool's own default "
                f"({'approval required' if risky else 'no approval'})",
            )
        if config.approval != "rules":
            return GateDecision(
                config.approval == "always", f"{where}: approval = {config.approval}"
            )
        try:
            arguments = call.parsed_arguments()
        except ValueError:
            return GateDecision(True, f"{where}: arguments unreadable, approval required")
        defaults = {} if isinstance(tool, str) else _schema_defaults(tool)
        for index, rule in enumerate(config.rules):
            if rule.matches(arguments, defaults):
                label = rule.name or f"{rule.argument} ~ /{rule.pattern.pattern}/"
                return GateDecision(True, f"{where}.rules[{index}] ({label})")
        return GateDecision(False, f"{where}: no rule matched")

    def gate(self, tool: Tool, call: ToolCall) -> bool:
        """agent_core's `ApprovalGate`: pass `policy.gate` as `approval_gate=`."""
        return self.decide(tool, call).requires_approval

    def rule_for(self, tool_name: Tool | str, call: ToolCall) -> str:
        """A human-readable name of the rule that applies to `call`, for the audit log."""
        return self.decide(tool_name, call).rule


def _schema_defaults(tool: Tool) -> dict[str, Any]:
    properties = tool.parameters.get("properties", {})
    if not isinstance(properties, dict):
        return {}
    return {
        key: spec["default"]
        for key, spec in properties.items()
        if isinstance(spec, dict) and "default" in spec
    }


# --- error messages ----------------------------------------------------------------------------


def _section(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    shape = [part if isinstance(part, int) else str(part) for part in loc[:-1]]
    match shape:
        case []:
            return Policy
        case ["defaults"]:
            return Defaults
        case ["tools", _]:
            return ToolPolicy
        case ["tools", _, "rules", int()]:
            return ArgumentRule
        case ["channels_policy", _]:
            return ChannelPolicy
    return None


def _key_path(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _did_you_mean(word: str, choices: Collection[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _explain(source: str, exc: ValidationError) -> str:
    problems: list[str] = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        key = _key_path(loc)
        if error["type"] == "extra_forbidden":
            section = _section(loc)
            choices = set(section.model_fields) if section else set()
            if section is ToolPolicy and loc[1] != "run_command":
                choices -= set(_RUN_COMMAND_ONLY)
            hint = _did_you_mean(str(loc[-1]), sorted(choices))
            problems.append(f"unknown key {key!r}{hint}")
            continue
        if error["type"] == "missing":
            problems.append(f"missing key {key!r}")
            continue
        message = str(error["msg"]).removeprefix("Value error, ")
        problems.append(f"{key}: {message}" if key else message)
    if len(problems) == 1:
        return f"policy file {source}: {problems[0]}"
    listed = "\n".join(f"  - {p}" for p in problems)
    return f"policy file {source}: {len(problems)} problems:\n{listed}"


# --- who may approve ---------------------------------------------------------------------------

FetchMembers = Callable[[str], Awaitable[Sequence[str]]]


class GroupResolver:
    """Members of Slack user groups, fetched through `fetch` and cached for `ttl`.

    `fetch` is the bot's wrapper around `usergroups.users.list`; a failed fetch is not cached.
    `clock` returns seconds (monotonic); tests pass their own.
    """

    def __init__(
        self,
        fetch: FetchMembers,
        *,
        ttl: timedelta = timedelta(minutes=5),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._ttl = ttl.total_seconds()
        self._clock = clock
        self._cache: dict[str, tuple[float, frozenset[str]]] = {}

    def _cached(self, group_id: str) -> frozenset[str] | None:
        hit = self._cache.get(group_id)
        if hit is not None and self._clock() - hit[0] < self._ttl:
            return hit[1]
        return None

    async def members(self, group_id: str) -> frozenset[str]:
        cached = self._cached(group_id)
        if cached is not None:
            return cached
        members = frozenset(await self._fetch(group_id))
        self._cache[group_id] = (self._clock(), members)
        return members

    async def is_member(self, group_id: str, user_id: str) -> bool:
        return user_id in await self.members(group_id)

    def forget(self, group_id: str | None = None) -> None:
        """Drop one group (or all) from the cache, e.g. on a `subteam_members_changed` event."""
        if group_id is None:
            self._cache.clear()
        else:
            self._cache.pop(group_id, None)


async def check_approver(
    policy: Policy,
    *,
    channel: str,
    user_id: str,
    requester: str | None,
    groups: GroupResolver,
    user_team: str | None = None,
    home_team: str | None = None,
) -> ApproverCheck:
    """May `user_id` approve a call that `requester` asked for in `channel`?

    `user_team` is the clicker's workspace, `home_team` the session's: with no approver list,
    "anyone in the channel" means anyone of that workspace, so in a Slack Connect channel
    people from another organisation must be named in the policy to decide.
    """
    if requester is not None and user_id == requester and not policy.allow_self_approval:
        return ApproverCheck(
            allowed=False,
            why=(
                "You asked for this, so you cannot approve it yourself: someone else has to. "
                "To allow it, set allow_self_approval = true in the policy file."
            ),
            rule="defaults.allow_self_approval = false",
        )
    spec = policy.approvers_for(channel)
    if spec.anyone and user_team and home_team and user_team != home_team:
        return ApproverCheck(
            False,
            "Only members of this workspace may decide here. To let people from another "
            "organisation approve, list them in the policy's approvers.",
            f"{spec.source} is empty: members of the session's workspace only",
        )
    if spec.anyone:
        return ApproverCheck(True, None, f"{spec.source} is empty: anyone in the channel")
    if user_id in spec.users:
        return ApproverCheck(True, None, f"{spec.source}: {user_id} is listed")
    unresolved: list[str] = []
    for group in spec.groups:
        try:
            if await groups.is_member(group, user_id):
                return ApproverCheck(True, None, f"{spec.source}: member of {group}")
        except Exception:  # Slack down or a missing scope: refuse, and say so
            logger.warning("could not list the members of user group %s", group, exc_info=True)
            unresolved.append(group)
    why = f"Only {spec.mention_text()} may approve this."
    if unresolved:
        failed = ", ".join(f"<!subteam^{g}>" for g in unresolved)
        why += f" (The members of {failed} could not be looked up just now; try again.)"
    return ApproverCheck(False, why, f"{spec.source}: {user_id} is not an approver")
