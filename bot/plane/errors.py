"""The plane's one exception tree."""

from __future__ import annotations

from ..errors import BotError

__all__ = ["BadRequest", "NotOpened", "PlaneError", "ReceiptInvalid"]


class PlaneError(BotError):
    """Something of the approval plane failed."""


class BadRequest(PlaneError):
    """A request body the API refuses (400); `field` names what is wrong."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field!r}: {problem}")
        self.field = field
        self.problem = problem


class ReceiptInvalid(PlaneError):
    """A receipt that does not prove an approval of this command: the message says why."""


class NotOpened(PlaneError):
    """A request that needs a person whose thread Slack refused (it is tried again)."""
