"""Who may decide in one channel, as the policy file says it (the rules that use it, and the
user-group lookups, live in `bot.approvals`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ApproverSpec"]


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
