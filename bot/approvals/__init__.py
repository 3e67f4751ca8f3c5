"""Approvals: every authorisation rule in one place, answering with a typed `Verdict`;
`authorize` is the one path every entry point takes to them."""

from .gate import Actor, GateAction, GatedCall, authorize
from .groups import FetchMembers, GroupResolver
from .rules import Approvals
from .verdicts import Action, Allowed, RefusalReason, Refused, Verdict, Who

__all__ = [
    "Action",
    "Actor",
    "Allowed",
    "Approvals",
    "FetchMembers",
    "GateAction",
    "GatedCall",
    "GroupResolver",
    "RefusalReason",
    "Refused",
    "Verdict",
    "Who",
    "authorize",
]
