"""The approval policy: which tool calls wait for a human, who may decide, and for how long.

It is read once at start-up from a TOML file (`OPSGATE_POLICY`) and validated strictly: a typo in
a safety setting must stop the bot with a message naming the file and the key, not quietly fall
back to a default. Without a file, `Policy.default()` applies: `run_command` always asks, anyone
but the requester may approve, one approval, one hour to decide.

`Policy.gate` is an agent_core `ApprovalGate`; `Policy.approvers_for` names who may decide in a
channel (the rules that apply it, and user-group lookups, are in `bot.approvals`).

`[tools.run_command]` also says where commands run (`workdir`), for how long at most
(`timeout`) and how much of their output is kept (`output_limit`).

Channels can be set up for ops automation in `[channels_policy.<channel id>]`: what starts a
run there (`trigger`), which integrations' messages may (`allowed_bots`), extra `instructions`
for the model, the `tools` offered, who approves, and how many runs go at once (`concurrency`).

Modules: `_fields` (the value types), `_model` (the file's sections), `_load` (reading the file
and explaining its errors), `_policy` (`Policy` and its queries), `_gate` (the approval gate),
`_approvers` (who may decide, as listed), `_audit` (`[audit]`: the webhook the audit log is
exported to), `_errors` (`PolicyError`).
"""

from __future__ import annotations

from ._approvers import ApproverSpec
from ._audit import AuditPolicy
from ._errors import PolicyError
from ._fields import Trigger
from ._gate import GateDecision
from ._model import ArgumentRule, ChannelPolicy, Defaults, ToolPolicy
from ._policy import Policy

__all__ = [
    "ApproverSpec",
    "ArgumentRule",
    "AuditPolicy",
    "ChannelPolicy",
    "Defaults",
    "GateDecision",
    "Policy",
    "PolicyError",
    "ToolPolicy",
    "Trigger",
]
