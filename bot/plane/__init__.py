"""The approval plane: other automation asks OpsGate's gate for a human decision over HTTP
(and the `opsgate ask`, `receipt verify`, `exec-approved` commands), and gets a signed receipt
the host where the command lands can check. See `desk` for how a request becomes a gated call.

Only light modules are imported here: the CLI's clients must not load Slack's SDK."""

from __future__ import annotations

from bot.errors import BadRequest, NotOpened, PlaneError, ReceiptInvalid

__all__ = ["BadRequest", "NotOpened", "PlaneError", "ReceiptInvalid"]
