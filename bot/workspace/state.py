"""What the local workspace holds as Slack would. Who and where: its team, three people,
channels, the bot and the alert integration, and the policy it runs when none is given, which
names them (the ids look like Slack's, U…, C…, D…, because every part of the bot reads them as
Slack ids). And what was said: its messages (with their threads, reactions and streams),
ephemeral messages, open modals and Home tabs, kept in a small SQLite file of its own.

The file sits beside the bot's store (`opsgate.db` → `opsgate-workspace.db`) rather than in it:
these rows are Slack's side of the conversation, not the bot's, so the store's schema (shared
with PostgreSQL, versioned by migrations) carries no tables of a stand-in, and deleting the file
gives a fresh workspace without touching the audit chain. A restart reads it back, so channels,
threads and waiting cards are where they were.

Every change bumps `version`; the page waits for a newer one (`wait_newer`) and redraws.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ..policy import Policy

__all__ = [
    "ALERT_BOT",
    "BOT",
    "CHANNELS",
    "DEFAULT_POLICY_NAME",
    "PEOPLE",
    "TEAM",
    "Channel",
    "OpenView",
    "Person",
    "PolicyText",
    "WorkspaceState",
    "channel_by_id",
    "channel_named",
    "default_policy_text",
    "dm_of",
    "person",
    "state_path",
    "workspace_policy",
]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    channel TEXT NOT NULL, ts TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (channel, ts));
CREATE TABLE IF NOT EXISTS views (
    view_id TEXT PRIMARY KEY, user_id TEXT NOT NULL, body TEXT NOT NULL);
"""


def state_path(store: Path | None) -> Path:
    """Where the workspace keeps its state: beside the SQLite store, else in the current
    directory (a PostgreSQL store)."""
    if store is None:
        return Path("opsgate-workspace.db")
    return store.with_name(f"{store.stem}-workspace.db")


@dataclass(frozen=True)
class OpenView:
    """A modal open for one person, or their Home tab (`kind` "home")."""

    view_id: str
    user_id: str
    view: dict[str, Any]
    errors: dict[str, str] | None = None

    @property
    def kind(self) -> str:
        return str(self.view.get("type") or "modal")


class WorkspaceState:
    """The workspace's messages and views, in memory and written through to `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.executescript(_SCHEMA)
        self.messages: dict[tuple[str, str], dict[str, Any]] = {}
        self.views: dict[str, OpenView] = {}
        for channel, ts, body in self._db.execute("SELECT channel, ts, body FROM messages"):
            message = json.loads(body)
            message.pop("streaming", None)  # Slack ends a stream nobody appends to
            self.messages[(channel, ts)] = message
        for view_id, user_id, body in self._db.execute("SELECT view_id, user_id, body FROM views"):
            self.views[view_id] = OpenView(view_id, user_id, json.loads(body))
        self.version = 1
        self.epoch = secrets.token_hex(4)
        """Names this process's run of the state: a page that saw another (before a restart)
        is answered at once, whatever version it saw."""
        self._changed = asyncio.Event()
        self._closing = False
        self._last_ts = max((_micros(ts) for _, ts in self.messages), default=0)
        self.triggers: dict[str, str] = {}
        """trigger_id → the user whose click made it (`views.open` opens for them)."""

    def close(self) -> None:
        self._db.close()

    def release(self) -> None:
        """Answer every page waiting for news now, and those that ask later at once: the
        process is stopping, and a waiting request would hold its stop."""
        self._closing = True
        self._changed.set()

    # -- changes -------------------------------------------------------------------------------

    def next_ts(self) -> str:
        """A Slack ts: the Unix time in microseconds, each later than the one before."""
        self._last_ts = max(time.time_ns() // 1000, self._last_ts + 1)
        return f"{self._last_ts // 1_000_000}.{self._last_ts % 1_000_000:06d}"

    def put(self, channel: str, message: dict[str, Any]) -> dict[str, Any]:
        """Add or replace a message (by its ts); written through and shown at once."""
        self.messages[(channel, message["ts"])] = message
        self._db.execute(
            "INSERT OR REPLACE INTO messages (channel, ts, body) VALUES (?, ?, ?)",
            (channel, message["ts"], json.dumps(message)),
        )
        self.bump()
        return message

    def delete(self, channel: str, ts: str) -> bool:
        found = self.messages.pop((channel, ts), None) is not None
        self._db.execute("DELETE FROM messages WHERE channel = ? AND ts = ?", (channel, ts))
        self.bump()
        return found

    def put_view(self, view: OpenView) -> None:
        self.views[view.view_id] = view
        self._db.execute(
            "INSERT OR REPLACE INTO views (view_id, user_id, body) VALUES (?, ?, ?)",
            (view.view_id, view.user_id, json.dumps(view.view)),
        )
        self.bump()

    def drop_view(self, view_id: str) -> None:
        self.views.pop(view_id, None)
        self._db.execute("DELETE FROM views WHERE view_id = ?", (view_id,))
        self.bump()

    def bump(self) -> None:
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait_newer(self, version: int, timeout: float) -> None:
        """Until the state is newer than `version`, or `timeout` seconds have passed."""
        if self.version > version or self._closing:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._changed.wait()

    # -- reading -------------------------------------------------------------------------------

    def message(self, channel: str, ts: str) -> dict[str, Any] | None:
        return self.messages.get((channel, ts))

    def in_channel(self, channel: str) -> Iterator[dict[str, Any]]:
        """The channel's messages (replies too), oldest first."""
        found = [m for (c, _), m in self.messages.items() if c == channel]
        yield from sorted(found, key=lambda m: _micros(m["ts"]))

    def modal_of(self, user_id: str) -> OpenView | None:
        """The person's topmost open modal (the last opened)."""
        open_ = [v for v in self.views.values() if v.user_id == user_id and v.kind == "modal"]
        return open_[-1] if open_ else None

    def home_of(self, user_id: str) -> OpenView | None:
        return self.views.get(home_view_id(user_id))


def home_view_id(user_id: str) -> str:
    return f"VHOME{user_id}"


def _micros(ts: str) -> int:
    seconds, _, fraction = ts.partition(".")
    return int(seconds) * 1_000_000 + int((fraction or "0").ljust(6, "0")[:6])


# Who and where: the directory the page, the Web API and the events read, and the default policy
# (`default_policy.toml`) that names the same ids.
TEAM = "T0LOCAL"
TEAM_NAME = "OpsGate local"


@dataclass(frozen=True)
class Person:
    """One local user: the page's switcher offers each."""

    user_id: str
    name: str
    role: str
    """What the default policy makes of them: "requester" or "approver"."""


@dataclass(frozen=True)
class Channel:
    """A conversation in the sidebar; `name` is its `data-channel` on the page."""

    channel_id: str
    name: str
    label: str
    kind: str
    """Slack's `channel_type`: "channel" or "im"."""


@dataclass(frozen=True)
class Bot:
    user_id: str
    bot_id: str
    app_id: str
    name: str


BOT = Bot(user_id="U0OPSGATE", bot_id="B0OPSGATE", app_id="A0OPSGATE", name="OpsGate")
ALERT_BOT = Bot(user_id="U0ALERTS", bot_id="B0ALERTS", app_id="A0ALERTS", name="Alertmanager")
"""The alert integration whose messages `#alerts` allow-lists."""

PEOPLE = (
    Person("U0RILEY", "Riley", "requester"),
    Person("U0SAM", "Sam", "approver"),
    Person("U0ALEX", "Alex", "approver"),
)

CHANNELS = (
    Channel("C0OPS", "ops", "#ops", "channel"),
    Channel("C0ALERTS", "alerts", "#alerts", "channel"),
)
"""The shared channels; each person also has a DM with the bot (`dm_of`)."""


def person(user_id: str) -> Person | None:
    return next((p for p in PEOPLE if p.user_id == user_id), None)


def channel_named(name: str) -> Channel | None:
    return next((c for c in CHANNELS if c.name == name), None)


def dm_of(user_id: str) -> Channel:
    """The person's DM with the bot: a channel of its own per person, as in Slack."""
    return Channel("D" + user_id.removeprefix("U"), "dm", "OpsGate", "im")


def channel_by_id(channel_id: str) -> Channel | None:
    found = next((c for c in CHANNELS if c.channel_id == channel_id), None)
    if found is None and channel_id.startswith("D"):
        owner = person("U" + channel_id.removeprefix("D"))
        return dm_of(owner.user_id) if owner else None
    return found


# -- the default policy --------------------------------------------------------------------------
# The policy the workspace runs when none is given (default_policy.toml, package data), written
# for the ids above: free reads, a card for anything else, two approvers for rm and kubectl
# delete (with a preview of what an rm would remove), rm -rf / forbidden, an "Allow for" window,
# and #alerts as an alert channel. Its page explains any command through policy explain's text,
# which the command that serves the workspace hands over (Page(explain=...)).

DEFAULT_POLICY_NAME = "default_policy.toml"


@dataclass(frozen=True)
class PolicyText:
    """The policy the workspace runs, as its page shows it."""

    source: str
    text: str
    built_in: bool


def default_policy_text() -> str:
    return resources.files(__package__).joinpath(DEFAULT_POLICY_NAME).read_text(encoding="utf-8")


def workspace_policy(path: Path | None) -> tuple[Policy, PolicyText]:
    """The policy file given (`OPSGATE_POLICY`, `./opsgate.toml`), else the built-in one."""
    if path is not None:
        text = path.read_text(encoding="utf-8")
        return Policy.load(path), PolicyText(str(path), text, built_in=False)
    text = default_policy_text()
    source = f"built-in {DEFAULT_POLICY_NAME}"
    return Policy.from_toml(text, source=source), PolicyText(source, text, built_in=True)
