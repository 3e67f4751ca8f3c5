"""Approvals: every authorisation rule in one place, answering with a typed `Verdict`."""

from .rules import Approvals, FetchMembers
from .verdicts import Action, Allowed, RefusalReason, Refused, Verdict, Who

__all__ = [
    "Action",
    "Allowed",
    "Approvals",
    "FetchMembers",
    "RefusalReason",
    "Refused",
    "Verdict",
    "Who",
]
