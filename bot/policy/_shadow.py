"""`[shadow]`: a second policy judged beside the live one, its verdicts only counted and audited;
`[mcp]`: who reviews a changed MCP tool's definition, and where.

`policy` names the file (relative to the policy file's directory); `OPSGATE_SHADOW_POLICY`
overrides it. A change can so run beside the current policy for a week before it is switched
on, with `opsgate_shadow_differences_total` and the `shadow_differs` audit rows saying where
it would have decided otherwise.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, StrictStr

from ._fields import ApproverId, ChannelId
from ._model import Model

__all__ = ["McpReviewSection", "ShadowSection"]


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
