"""`Policy`: the whole policy file, and the questions the bot asks it about a channel or a call."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, PrivateAttr, StrictStr, ValidationError, model_validator

from agent_core import Tool, ToolCall
from bot.errors import PolicyError

from ._fields import GROUP_ID, ChannelId, Trigger
from ._gate import COMMAND_TOOL, GateDecision, approval_summary, built_in_tools, decide
from ._load import did_you_mean, explain, parse_toml, read_policy_file
from ._mcp import (
    McpServerConfig,
    McpServerName,
    is_mcp,
    mcp_approval_summary,
    mcp_decision,
    misplaced_mcp_sections,
    offered_tools,
    server_of,
    unknown_wildcards,
)
from ._model import (
    NO_OVERRIDE,
    RUN_COMMAND_ONLY,
    ActiveFreeze,
    ApproverSpec,
    AuditPolicy,
    ChannelPolicy,
    Defaults,
    FreezeSpec,
    McpReviewSection,
    Model,
    PlanePolicy,
    ShadowSection,
    ToolPolicy,
    check_reachable,
    freeze_name,
)
from ._oncall import (
    NOBODY_ON_CALL,
    OncallSpec,
    Paged,
    Paging,
    Unpaged,
    nobody_on_call,
    oncall_name,
    resolve,
)

__all__ = ["Policy"]

_BUILT_IN_SOURCE = "(built-in default policy)"


class Policy(Model):
    """The whole policy file. Build it with `Policy.load(path)` or `Policy.default()`."""

    defaults: Defaults = Defaults()
    tools: dict[Annotated[StrictStr, Field(min_length=1)], ToolPolicy] = Field(default_factory=dict)
    channels_policy: dict[ChannelId, ChannelPolicy] = Field(default_factory=dict)
    mcp_servers: dict[McpServerName, McpServerConfig] = Field(default_factory=dict)
    """`[mcp_servers.NAME]`: MCP tool servers whose tools are offered as `NAME__TOOL`."""
    audit: AuditPolicy = AuditPolicy()
    """`[audit]`: the audit log's export (a webhook)."""
    freezes: tuple[FreezeSpec, ...] = ()
    """`[[freezes]]`: change freezes (`bot.policy._model`)."""
    shadow: ShadowSection = ShadowSection()
    """`[shadow]`: a policy judged beside this one, not acted on (`bot.runs.context`)."""
    mcp: McpReviewSection = McpReviewSection()
    """`[mcp]`: the review of changed MCP tool definitions (`bot.slack.listeners.cards`)."""
    oncall: dict[Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9_-]+$")], OncallSpec] = Field(
        default_factory=dict
    )
    """`[oncall.<name>]`: who an approver entry `oncall:<name>` is (`_oncall`)."""
    plane: PlanePolicy = PlanePolicy()
    """`[plane]`: outside automation that may ask for approvals (`_model.PlanePolicy`)."""

    _source: str = PrivateAttr(default=_BUILT_IN_SOURCE)
    _paging: Paging | None = PrivateAttr(default=None)
    _built_in: Mapping[str, ToolPolicy] = PrivateAttr(default_factory=built_in_tools)

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
            misplaced = [key for key in RUN_COMMAND_ONLY if key in section]
            if misplaced:
                raise ValueError(
                    f"unknown key {f'tools.{name}.{misplaced[0]}'!r}: "
                    f"{', '.join(RUN_COMMAND_ONLY)} are settings of [tools.run_command] only"
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
            check_reachable(approvers, required, f"channels_policy.{channel}.approvers")
        for name, section in self.tools.items():
            if section.preview is not None and name in (COMMAND_TOOL, section.preview):
                raise ValueError(
                    f"tools.{name}.preview: "
                    + (
                        "run_command's previews are commands: write `preview` on a "
                        "[[tools.run_command.rules]] entry"
                        if name == COMMAND_TOOL
                        else "a tool cannot be its own preview; name a read-only tool"
                    )
                )
            for index, rule in enumerate(section.rules):
                if rule.prefix is not None and name != COMMAND_TOOL:
                    raise ValueError(
                        f"tools.{name}.rules[{index}]: `prefix` matches shell commands, so it is "
                        f"for [[tools.{COMMAND_TOOL}.rules]] only; use `argument` and `pattern`"
                    )
        _check_oncall_names(self)
        lists = {channel: c.tools for channel, c in self.channels_policy.items()}
        problem = unknown_wildcards(lists, self.mcp_servers) or misplaced_mcp_sections(
            self.tools, self.mcp_servers
        )
        if problem:
            raise ValueError(problem)
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
        text = read_policy_file(path)
        return cls.from_toml(text, source=str(path), known_tools=known_tools)

    @classmethod
    def from_toml(
        cls,
        text: str,
        *,
        source: str = "<policy>",
        known_tools: Collection[str] | None = None,
    ) -> Policy:
        """Like `load`, from text; `source` names it in error messages."""
        data = parse_toml(text, source)
        try:
            policy = cls.model_validate(data)
        except ValidationError as exc:
            raise PolicyError(explain(source, exc, cls)) from None
        policy._source = source
        if known_tools is not None:
            policy.check_tools(known_tools)
        return policy

    def check_tools(
        self, known_tools: Collection[str], *, unchecked_servers: Collection[str] = ()
    ) -> None:
        """Raise `PolicyError` if the file configures or offers a tool that the bot lacks.

        Known tools include the MCP servers' `NAME__TOOL`s (`NAME__*` entries were checked
        when the file was read); `unchecked_servers` did not start (`opsgate check` reports
        them), so their tools' names cannot be checked.
        """
        known = sorted(set(known_tools))
        places = [(f"[tools.{name}]", name) for name in self.tools]
        for channel, override in self.channels_policy.items():
            places += [(f"channels_policy.{channel}.tools", name) for name in override.tools or ()]
        for index, freeze in enumerate(self.freezes):
            places += [(f"{freeze_name(index)}.tools", name) for name in freeze.tools or ()]
        places += [
            (f"tools.{name}.preview", section.preview)
            for name, section in self.tools.items()
            if section.preview is not None
        ]
        for server, config in self.mcp_servers.items():
            places += [
                (f"mcp_servers.{server}.tools.{tool}.preview", f"{server}__{o.preview}")
                for tool, o in config.tools.items()
                if o.preview is not None
            ]
        for where, name in places:
            if name.endswith("__*") or server_of(name) in unchecked_servers:
                continue
            if name not in known:
                raise PolicyError(
                    f"policy file {self._source}: {where}: unknown tool {name!r}"
                    f"{did_you_mean(name, known)}; known tools: {', '.join(known) or 'none'}"
                )

    # settings

    @property
    def shadow_path(self) -> Path | None:
        """The file `[shadow] policy` names (relative: beside this policy's file)."""
        return self.shadow.path(self._source)

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

    @property
    def reject_reasons(self) -> tuple[str, ...]:
        return self.defaults.reject_reasons

    def tool_policy(self, tool: str) -> ToolPolicy:
        """The tool's `[tools.NAME]` section, its built-in default, or every key at its default."""
        return self.tools.get(tool) or self._built_in.get(tool) or ToolPolicy()

    # channels

    def allows_channel(self, channel: str) -> bool:
        """Whether the bot acts in `channel` (every channel when the file lists none)."""
        return self.defaults.channels is None or channel in self.defaults.channels

    def channel(self, channel: str | None) -> ChannelPolicy:
        """The channel's own section, or an empty one (every key at its default)."""
        found = self.channels_policy.get(channel) if channel is not None else None
        return found if found is not None else NO_OVERRIDE

    def approvers_for(
        self,
        channel: str | None,
        decision: GateDecision | None = None,
        now: datetime | None = None,
    ) -> ApproverSpec:
        """Who may decide a call in `channel`: the deciding rule's `approvers` when it has
        them (they replace the channel's), else the channel's, else the defaults'; each
        `oncall:<name>` is whoever is on call at `now` (default: this moment)."""
        own = self.channel(channel).approvers
        if decision is not None and decision.approvers is not None:
            approvers = decision.approvers
            source = f"{decision.policy_rule or 'defaults'}.approvers"
        elif own is not None:
            approvers, source = own, f"channels_policy.{channel}.approvers"
        else:
            approvers, source = self.defaults.approvers, "defaults.approvers"
        if any(a.startswith("oncall:") for a in approvers):
            nobody = nobody_on_call(approvers, self.oncall, now, self.paged, self._unpaged())
            people = resolve(approvers, self.oncall, now, self.paged)
            approvers = (*people, *nobody) or (NOBODY_ON_CALL,)
        return ApproverSpec(
            users=tuple(a for a in approvers if not GROUP_ID.fullmatch(a)),
            groups=tuple(a for a in approvers if GROUP_ID.fullmatch(a)),
            source=source,
        )

    def required_approvals_for(
        self, channel: str | None, decision: GateDecision | None = None
    ) -> int:
        if decision is not None and decision.required_approvals is not None:
            return decision.required_approvals
        own = self.channel(channel).required_approvals
        return own if own is not None else self.defaults.required_approvals

    def paged_by(self, paging: Paging) -> Policy:
        """This policy, its `pagerduty_schedule` on-call names resolved through `paging`: a
        new policy, built before anything that decides with it (`bot.wiring.open_deps`)."""
        policy = self.model_copy()
        policy._paging = paging
        return policy

    @property
    def paged(self) -> Paged | None:
        """Who the paging service says is on call per schedule (`paged_by`); None without."""
        return self._paging.known if self._paging is not None else None

    def _unpaged(self) -> Unpaged | None:
        return self._paging.why_nobody if self._paging is not None else None

    @property
    def pagerduty_schedules(self) -> tuple[str, ...]:
        return tuple(
            sorted({s.pagerduty_schedule for s in self.oncall.values() if s.pagerduty_schedule})
        )

    def ttl_for(self, decision: GateDecision | None = None) -> timedelta:
        """How long a call waits for its decision: the deciding rule's `ttl`, or the default."""
        if decision is not None and decision.ttl is not None:
            return decision.ttl
        return self.defaults.ttl

    def allow_window(
        self, tool: str, channel: str | None, decision: GateDecision | None = None
    ) -> timedelta | None:
        """How long an "Allow for" on a card of this call lasts; None when the card offers
        none: no `allow_for` (the rule's, else the tool's), a forbidden call, more than one
        approval needed, or a rule with a `preview` (an allowed call would run unpreviewed)."""
        if decision is not None and (decision.forbidden or decision.preview is not None):
            return None
        if self.required_approvals_for(channel, decision) != 1:
            return None
        if decision is not None and len(decision.needs()) > 1:
            return None  # several rules ask: each must be met, so no allowance covers it
        if decision is not None and decision.allow_for is not None:
            return decision.allow_for
        return self.tool_policy(tool).allow_for

    def trigger_for(self, channel: str | None) -> Trigger:
        return self.channel(channel).trigger

    def allows_bot(self, channel: str | None, *ids: str | None) -> bool:
        """Whether a message from a bot with any of these bot/app ids may start runs here."""
        allowed = self.channel(channel).allowed_bots
        return any(i in allowed for i in ids if i)

    def instructions_for(self, channel: str | None) -> str | None:
        return self.channel(channel).instructions

    def tools_for(self, channel: str | None) -> tuple[str, ...] | None:
        """The entries of the channel's `tools` list (`NAME__*` included); None: every tool."""
        return self.channel(channel).tools

    def offered_tools(
        self, channel: str | None, tools: Mapping[str, Tool]
    ) -> tuple[Tool, ...] | None:
        """The tools offered in the channel, `NAME__*` expanded; None means every tool."""
        entries = self.tools_for(channel)
        return None if entries is None else offered_tools(entries, tools)

    def concurrency_for(self, channel: str | None) -> int:
        own = self.channel(channel).concurrency
        return own if own is not None else self.defaults.concurrency

    # tools and the gate

    def approval_summary(self, tool: Tool | str) -> str:
        """When calls of a tool wait for a human, in a few words (for `/opsgate help`)."""
        if is_mcp(tool):
            return mcp_approval_summary(tool)
        return approval_summary(tool, self.tools, self._built_in)

    def decide(self, tool: Tool | str, call: ToolCall) -> GateDecision:
        """Whether `call` waits for a human, and which rule decided (see `_gate.decide`; an
        MCP tool decides by its server's settings, see `_mcp.mcp_decision`)."""
        if is_mcp(tool):
            return mcp_decision(tool, call)
        return decide(tool, call, self.tools, self._built_in)

    def gate(self, tool: Tool, call: ToolCall) -> bool:
        """agent_core's `ApprovalGate`: pass `policy.gate` as `approval_gate=`."""
        return self.decide(tool, call).requires_approval

    # freezes and break-glass

    def active_freezes(self, now: datetime) -> list[ActiveFreeze]:
        """The file's freezes in force at `now` (ad hoc ones are in the store)."""
        found = []
        for index, spec in enumerate(self.freezes):
            window = spec.window_at(now)
            if window is not None and window[0] <= now < window[1]:
                found.append(self._active(index, spec, window))
        return found

    def ended_freezes(self, now: datetime) -> list[ActiveFreeze]:
        """Each file freeze's latest window that has ended by `now` (to announce its end)."""
        found = []
        for index, spec in enumerate(self.freezes):
            window = spec.window_at(now)
            if window is not None and window[1] <= now:
                found.append(self._active(index, spec, window))
            elif window is not None and spec.schedule is not None:
                earlier = spec.window_at(window[0] - timedelta(seconds=1))
                if earlier is not None and earlier[1] <= now:
                    found.append(self._active(index, spec, earlier))
        return found

    def _active(
        self, index: int, spec: FreezeSpec, window: tuple[datetime, datetime]
    ) -> ActiveFreeze:
        return ActiveFreeze(
            key=freeze_name(index),
            label=freeze_name(index),
            started_at=window[0],
            until=window[1],
            message=spec.message,
            channels=spec.channels,
            tools=spec.tools,
        )

    def break_glass_approvers(self, decision: GateDecision | None = None) -> ApproverSpec:
        """Who may break glass on a call: `defaults.break_glass_approvers`, and the deciding
        rule's own `approvers` when it names them (nobody when neither lists anyone)."""
        listed = list(self.defaults.break_glass_approvers)
        source = "defaults.break_glass_approvers"
        if decision is not None and decision.approvers is not None:
            listed += [a for a in decision.approvers if a not in listed]
            source += f" and {decision.policy_rule}.approvers"
        return ApproverSpec(
            users=tuple(a for a in listed if not GROUP_ID.fullmatch(a)),
            groups=tuple(a for a in listed if GROUP_ID.fullmatch(a)),
            source=source,
        )

    def rule_for(self, tool_name: Tool | str, call: ToolCall) -> str:
        """A human-readable name of the rule that applies to `call`, for the audit log."""
        return self.decide(tool_name, call).rule


def _check_oncall_names(policy: Policy) -> None:
    """Every `oncall:<name>` the file uses names an `[oncall.<name>]` section."""
    lists: list[tuple[str, Sequence[str]]] = [("defaults.approvers", policy.defaults.approvers)]
    lists += [
        (f"defaults.escalate[{i}].approvers", s.approvers)
        for i, s in enumerate(policy.defaults.escalate)
    ]
    for channel, own in policy.channels_policy.items():
        lists.append((f"channels_policy.{channel}.approvers", own.approvers or ()))
    for tool, section in policy.tools.items():
        for index, rule in enumerate(section.rules):
            where = f"tools.{tool}.rules[{index}]"
            lists.append((f"{where}.approvers", rule.approvers or ()))
            lists += [
                (f"{where}.escalate[{i}].approvers", s.approvers)
                for i, s in enumerate(rule.escalate or ())
            ]
    for key, entries in lists:
        for entry in entries:
            name = oncall_name(entry)
            if name is not None and name not in policy.oncall:
                raise ValueError(f"{key} names {entry!r} but there is no [oncall.{name}] section")
