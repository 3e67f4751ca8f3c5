"""The approval policy: which tool calls wait for a human, who may decide, and for how long.

It is read once at start-up from a TOML file (`OPSGATE_POLICY`) and validated strictly: a typo in
a safety setting must stop the bot with a message naming the file and the key, not quietly fall
back to a default. Without a file, `Policy.default()` applies: `run_command` always asks, anyone
but the requester may approve, one approval, one hour to decide.

`Policy.gate` is an agent_core `ApprovalGate`; `Policy.decide` says what a call gets as a typed
`GateDecision` (runs, waits, forbidden; the deciding rule `tools.<tool>.rules[<i>]` with its own
approvers, quorum, ttl, allow_for and justification). `Policy.approvers_for` names who may
decide a call in a channel (the rules that apply it, and user-group lookups, are in
`bot.approvals`). `run_command` rules match the command's parsed shell (`parse_command`).

`[tools.run_command]` also says where commands run (`workdir`), for how long at most
(`timeout`) and how much of their output is kept (`output_limit`).

Channels can be set up for ops automation in `[channels_policy.<channel id>]`: what starts a
run there (`trigger`), which integrations' messages may (`allowed_bots`), extra `instructions`
for the model, the `tools` offered, who approves, and how many runs go at once (`concurrency`).

Modules: `_fields` (the value types, argument rules and `preview_args` among them), `_model` (the
file's sections: tools, channels, who may decide as listed, `[audit]`, `[shadow]`, `[mcp]`,
`[plane]`, `[[freezes]]`), `_rules` (one `[[tools.<name>.rules]]` entry), `_shell` (shell text to
simple commands), `_words` (a word's value, and why a command cannot be judged), `_wrappers`
(peeling `sudo`, `timeout`, ..., and the table of their options), `_load` (reading the file and
explaining its errors), `_policy` (`Policy` and its queries), `_preview` (a rule's preview
template), `_gate` (the approval gate and its verdict order), `_mcp` (`[mcp_servers]` and MCP tools'
gate), `_changes` (one call's verdict as a value, and whether another policy's is looser), `_oncall`
(`[oncall.<name>]`, escalation steps as written, and a waiting call's reminders and escalation).
`PolicyError` is in `bot.errors`.
"""

from __future__ import annotations

from bot.errors import PolicyError

from ._changes import ANYONE, CallVerdict, Direction, call_verdict, compare_verdicts
from ._fields import Trigger
from ._gate import GateDecision, PartVerdict, Requirement
from ._mcp import (
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_OUTPUT_LIMIT,
    DEFAULT_START_TIMEOUT,
    QUARANTINED,
    McpApproval,
    McpApprovalMode,
    McpGated,
    McpServerConfig,
    McpServerName,
    McpToolOverride,
    mcp_approval,
    mcp_requires_approval,
    qualified_name,
    selects,
)
from ._model import (
    ActiveFreeze,
    ApproverSpec,
    ArgumentRule,
    AuditPolicy,
    ChannelPolicy,
    Defaults,
    FreezeSpec,
    PlaneClient,
    PlanePolicy,
    ToolPolicy,
    freeze_name,
)
from ._oncall import (
    NOBODY_ON_CALL,
    EscalationStep,
    Ladder,
    OncallSpec,
    added_by,
    escalated,
    ladder_for,
    ladder_tick,
    oncall_now,
)
from ._policy import Policy
from ._preview import DEFAULT_PREVIEW_TTL, PreviewPlan
from ._rules import Rule, Tier
from ._shell import ParsedCommand, SimpleCommand, parse_command

__all__ = [  # noqa: RUF022 -- plain sorted() order, as every package here
    "ANYONE",
    "ActiveFreeze",
    "ApproverSpec",
    "ArgumentRule",
    "AuditPolicy",
    "CallVerdict",
    "ChannelPolicy",
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_OUTPUT_LIMIT",
    "DEFAULT_PREVIEW_TTL",
    "DEFAULT_START_TIMEOUT",
    "Defaults",
    "Direction",
    "EscalationStep",
    "FreezeSpec",
    "GateDecision",
    "Ladder",
    "McpApproval",
    "McpApprovalMode",
    "McpGated",
    "McpServerConfig",
    "McpServerName",
    "McpToolOverride",
    "NOBODY_ON_CALL",
    "OncallSpec",
    "ParsedCommand",
    "PartVerdict",
    "PlaneClient",
    "PlanePolicy",
    "Policy",
    "PolicyError",
    "PreviewPlan",
    "QUARANTINED",
    "Requirement",
    "Rule",
    "SimpleCommand",
    "Tier",
    "ToolPolicy",
    "Trigger",
    "added_by",
    "call_verdict",
    "compare_verdicts",
    "escalated",
    "freeze_name",
    "ladder_for",
    "ladder_tick",
    "mcp_approval",
    "mcp_requires_approval",
    "oncall_now",
    "parse_command",
    "qualified_name",
    "selects",
]
