"""A client of the plane's HTTP API (`OPSGATE_URL`, `OPSGATE_CLIENT_TOKEN`): ask, then wait for
the decision with long polls. Used by `opsgate ask`, the Claude Code hook and `mcp-serve`."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from bot.errors import PlaneClientError

__all__ = ["Asked", "ask_and_wait", "client_from_env"]

LONG_POLL = 55.0
LINK_POLL = 1.0


@dataclass(frozen=True, slots=True)
class Asked:
    """The last answer about a request; `timed_out`: the caller's wait ended first."""

    answer: dict[str, Any]
    timed_out: bool = False

    @property
    def state(self) -> str:
        return str(self.answer.get("state"))


def client_from_env() -> tuple[str, str]:
    url = os.environ.get("OPSGATE_URL", "").rstrip("/")
    token = os.environ.get("OPSGATE_CLIENT_TOKEN", "")
    if not url:
        raise PlaneClientError(
            "OPSGATE_URL is not set (the bot's address, e.g. http://opsgate:3000)"
        )
    if not token:
        raise PlaneClientError("OPSGATE_CLIENT_TOKEN is not set (this client's bearer token)")
    return url, token


def _json(response: httpx.Response) -> dict[str, Any]:
    if response.status_code >= 400:
        try:
            why = str(response.json().get("error"))
        except ValueError:
            why = response.text.strip()
        raise PlaneClientError(
            f"OpsGate answered {response.status_code}: {why}", response.status_code
        )
    data = response.json()
    if not isinstance(data, dict):
        raise PlaneClientError("OpsGate answered something other than a JSON object")
    return data


def ask_and_wait(
    body: dict[str, Any],
    *,
    wait: float | None = None,
    on_link: Callable[[str], None] = lambda _: None,
    url: str | None = None,
    token: str | None = None,
) -> Asked:
    """Post the request, then long-poll until it is decided or `wait` seconds passed (None:
    until decided). `on_link` gets the card's permalink once known."""
    if url is None or token is None:
        url, token = client_from_env()
    headers = {"Authorization": f"Bearer {token}"}
    deadline = None if wait is None else time.monotonic() + wait
    try:
        with httpx.Client(timeout=httpx.Timeout(10.0, read=LONG_POLL + 15)) as http:
            posted = _json(http.post(f"{url}/v1/approvals", json=body, headers=headers))
            where = f"{url}/v1/approvals/{posted['id']}"
            linked = False
            # The first read does not wait: the card's link is shown while people decide.
            left = 0.0
            while True:
                params = {"wait": f"{max(0.0, min(LONG_POLL, left)):.1f}"}
                answer = _json(http.get(where, params=params, headers=headers))
                if answer.get("permalink") and not linked:
                    on_link(str(answer["permalink"]))
                    linked = True
                if answer.get("state") != "pending":
                    return Asked(answer)
                left = LONG_POLL if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    return Asked(answer, timed_out=True)
                if not linked:  # short polls until the card is posted and its link known
                    left = min(left, LINK_POLL)
    except httpx.HTTPError as exc:
        raise PlaneClientError(f"cannot reach OpsGate at {url}: {exc}") from None
