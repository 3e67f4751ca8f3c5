"""`[plane]` and `[plane.clients.<name>]`: which outside automation may ask for approvals.

A client is known by the SHA-256 of its bearer token (the file never holds the token), and may
ask only for its `tools`, with cards only in its `channels`. No client: the plane is off.
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import timedelta
from typing import Annotated

from pydantic import AfterValidator, Field, StrictStr

from ._fields import ApproverId, ChannelId, Duration, ToolName
from ._model import Model

__all__ = ["PlaneClient", "PlanePolicy"]


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
