"""`[audit]`: where the audit log is exported to (`bot/observability/audit_export.py`).

The webhook receives every audit row, untrusted text included, so it must be https, or plain
http only to an address that cannot leave the host or the private network (a loopback or
private IP literal, or `localhost`): a typo must not send the log across the internet in the
clear.
"""

from __future__ import annotations

import ipaddress
from datetime import timedelta
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, StrictInt, StrictStr

from ._fields import Duration
from ._model import Model

__all__ = ["AuditPolicy", "webhook_url"]


def webhook_url(url: str) -> str:
    """`url` if it is https, or http to a loopback or private address; else ValueError."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme not in ("https", "http") or not host:
        raise ValueError(f"the audit webhook must be an https:// URL, not {url!r}")
    if parts.username or parts.password:
        raise ValueError("the audit webhook URL must not hold credentials (they would be logged)")
    if parts.scheme == "http" and not _local(host):
        raise ValueError(
            f"the audit webhook {host!r} is plain http: use https, or http only to a loopback "
            "or private address"
        )
    return url


def _local(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private


class AuditPolicy(Model):
    """`webhook`: the collector each batch of rows is POSTed to (a JSON array, in seq order,
    at least once). `batch`: rows per delivery at most. `retry_max`: the longest wait between
    retries (the wait doubles from one second up to it). `unready_after`: failed deliveries in
    a row after which `/readyz` reports the export."""

    webhook: Annotated[StrictStr, AfterValidator(webhook_url)] | None = None
    batch: Annotated[StrictInt, Field(ge=1, le=10_000)] = 100
    retry_max: Duration = timedelta(minutes=1)
    unready_after: Annotated[StrictInt, Field(ge=1)] = 5
