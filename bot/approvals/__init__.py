"""Approvals: every authorisation rule in one place (`authorize.py`), answering with a typed
`Verdict`; `authorize` is the one path every entry point takes to them. `pagerduty.py` says who
PagerDuty has on call, for the policy's on-call rotations."""

from .authorize import (
    Action,
    Actor,
    Allowed,
    Approvals,
    FetchMembers,
    GateAction,
    GatedCall,
    GroupResolver,
    RefusalReason,
    Refused,
    Verdict,
    Who,
    authorize,
)

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
