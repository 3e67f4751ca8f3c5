"""`[audit]`: the webhook must be https, or plain http only to a loopback or private address."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.policy import Policy, PolicyError


@pytest.mark.parametrize(
    "url",
    [
        "https://siem.example.com/ingest?token=x",
        "http://127.0.0.1:8080/ingest",
        "http://10.1.2.3/ingest",
        "http://[::1]:9000/",
        "http://localhost/ingest",
    ],
)
def test_webhooks_accepted(url: str) -> None:
    policy = Policy.from_toml(f'[audit]\nwebhook = "{url}"\nretry_max = "5s"\n')
    assert policy.audit.webhook == url and policy.audit.retry_max == timedelta(seconds=5)


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://siem.example.com/ingest", "plain http"),
        ("http://8.8.8.8/ingest", "plain http"),
        ("ftp://10.0.0.1/x", "https://"),
        ("https://user:pw@siem.example.com/", "credentials"),
        ("siem.example.com", "https://"),
    ],
)
def test_webhooks_refused(url: str, why: str) -> None:
    with pytest.raises(PolicyError, match=why):
        Policy.from_toml(f'[audit]\nwebhook = "{url}"\n')


def test_no_audit_section_exports_nothing() -> None:
    assert Policy.default().audit.webhook is None
    with pytest.raises(PolicyError, match="webhok"):
        Policy.from_toml('[audit]\nwebhok = "https://x/"\n')
