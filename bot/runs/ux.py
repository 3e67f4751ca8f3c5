"""What edits, allowances, the Home tab and the message shortcut show, as plain data, and the
notices they add.

The run service builds these from the store and the policy; `bot.slack` renders them (Block Kit
and mrkdwn, escaping untrusted text through `bot.slack._text`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from .cards import CardCall

__all__ = [
    "AllowChoice",
    "AllowForm",
    "AllowanceGranted",
    "AllowanceInfo",
    "AllowanceList",
    "AllowanceRevoked",
    "AllowanceUsed",
    "EditErrors",
    "EditField",
    "EditForm",
    "HomeView",
    "NothingRevoked",
]


@dataclass(frozen=True, slots=True)
class AllowanceInfo:
    """An active allowance: calls of `tool` shaped like `label` run in `channel` until
    `expires_at` without a card."""

    id: str
    channel: str
    tool: str
    label: str
    granted_by: str
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class AllowChoice:
    """One shape an "Allow for" may create: its fixed words, and commands it does and does not
    cover (generated from it, for the granter to see)."""

    label: str
    matching: tuple[str, ...]
    not_matching: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class AllowForm:
    """The Allow dialog of a pending call whose shape the granter chooses (the default
    first). `digest` binds the choice to the call as it was when the dialog opened."""

    ledger_id: str
    tool: str
    digest: str
    window: str
    choices: tuple[AllowChoice, ...]


@dataclass(frozen=True, slots=True)
class EditField:
    """One field of the edit form: an argument, prefilled with its current value as text
    (strings as they are, anything else as JSON)."""

    name: str
    value: str
    required: bool
    description: str = ""


@dataclass(frozen=True, slots=True)
class EditForm:
    """The edit form of a pending call: for `run_command` the one command field, otherwise
    one field per argument of the tool's schema."""

    ledger_id: str
    tool: str
    digest: str
    fields: tuple[EditField, ...]
    command: bool = False
    """True for `run_command`: one plain text field holding exactly the command."""


@dataclass(frozen=True, slots=True)
class EditErrors:
    """The submitted form does not fit the tool's schema: a message per field name."""

    errors: dict[str, str]


@dataclass(frozen=True)
class HomeView:
    """A person's Home tab."""

    user: str
    to_decide: tuple[CardCall, ...] = ()
    """Calls `user` may decide now (with Approve, Reject, Edit)."""
    waiting: tuple[CardCall, ...] = ()
    """`user`'s own requests waiting for someone else (no Approve)."""
    allowances: tuple[AllowanceInfo, ...] = ()
    policy: str = ""
    """One paragraph: what needs approval and who decides."""
    channels: tuple[str, ...] = field(default=())
    """The channels the allowances and approvals were gathered from."""


# -- notices --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AllowanceUsed:
    """A call ran without a card under `allowance` (posted in the thread as one line)."""

    tool: str
    allowance: AllowanceInfo
    kind: Literal["allowance_used"] = "allowance_used"


@dataclass(frozen=True, slots=True)
class AllowanceGranted:
    """`allowance` was granted from a card in this thread."""

    allowance: AllowanceInfo
    kind: Literal["allowance_granted"] = "allowance_granted"


@dataclass(frozen=True, slots=True)
class AllowanceList:
    """The active allowances of a channel (private answer to `/opsgate allowances`)."""

    channel: str
    entries: tuple[AllowanceInfo, ...]
    kind: Literal["allowance_list"] = "allowance_list"


@dataclass(frozen=True, slots=True)
class AllowanceRevoked:
    """`by` ended allowance `allowance` early."""

    allowance: AllowanceInfo
    by: str
    kind: Literal["allowance_revoked"] = "allowance_revoked"


@dataclass(frozen=True, slots=True)
class NothingRevoked:
    """A Revoke click changed nothing: `why`."""

    why: str
    kind: Literal["nothing_revoked"] = "nothing_revoked"
