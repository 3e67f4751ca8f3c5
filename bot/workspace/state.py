"""What the local workspace holds as Slack would: its messages (with their threads, reactions and
streams), ephemeral messages, open modals and Home tabs; kept in a small SQLite file of its own.

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
from pathlib import Path
from typing import Any

__all__ = ["OpenView", "WorkspaceState", "state_path"]

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
