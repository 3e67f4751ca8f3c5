"""Approvals: every authorisation rule in one place, answering with a typed `Verdict`."""

from .groups import FetchMembers, GroupResolver
from .rules import Approvals
from .verdicts import Action, Allowed, RefusalReason, Refused, Verdict, Who

__all__ = [
    "Action",
    "Allowed",
    "Approvals",
    "FetchMembers",
    "GroupResolver",
    "RefusalReason",
    "Refused",
    "Verdict",
    "Who",
]
