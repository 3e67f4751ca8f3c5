"""`bot.store` as a package: its public names, its boundaries, its errors and `open_store`.

The behaviour of the `Store` interface is tested per backend in `tests/store/contract/`; what
only SQLite promises is in `tests/store/test_sqlite.py`.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

import bot.store
from bot.errors import BotError
from bot.store import SQLiteStore, Store, StoreError, open_store
from bot.words import format_duration
from tests.store.contract.helpers import paused_session

__all__ = ["paused_session"]  # tests/scenarios/test_cancel.py imports it from here (home: helpers)


def test_public_api_is_sorted() -> None:
    assert bot.store.__all__ == sorted(bot.store.__all__)


def test_the_store_and_audit_command_never_import_slack() -> None:
    code = (
        "import sys, bot.store, bot.cli.audit; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('slack_sdk', 'slack_bolt')))"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"


def test_format_duration_approximates_only_measured_spans() -> None:
    """One `format_duration` (bot.words) for the policy and the store: exact for what people
    wrote, rounded to the minute within 5 seconds for a span measured on a clock."""
    assert not hasattr(bot.store, "format_duration")
    assert format_duration(timedelta(minutes=15, seconds=2), approximate=True) == "15m"
    assert format_duration(timedelta(minutes=14, seconds=57.6), approximate=True) == "15m"
    assert format_duration(timedelta(minutes=15, seconds=2)) == "15m2s"
    for approximate in (False, True):
        assert format_duration(timedelta(seconds=90), approximate=approximate) == "1m30s"
        assert format_duration(timedelta(hours=1, minutes=30), approximate=approximate) == "1h30m"
        assert format_duration(timedelta(days=1), approximate=approximate) == "1d"
        assert format_duration(timedelta(seconds=-3), approximate=approximate) == "0s"


def test_every_store_error_is_a_bot_error() -> None:
    for name in ("DatabaseLocked", "InvalidTransition", "SchemaTooNew", "UnknownCall"):
        assert issubclass(getattr(bot.store, name), StoreError)
    assert issubclass(StoreError, BotError)


async def test_open_store_gives_sqlite_for_a_path(tmp_path: Path) -> None:
    for target in (tmp_path / "a.db", str(tmp_path / "b.db")):
        store = open_store(target, exclusive=True)
        assert isinstance(store, SQLiteStore) and isinstance(store, Store)
        assert store.path == Path(target) and store.exclusive
        async with store:
            session = await store.get_or_create_session("T1", "C1", "1.0")
            assert await store.get_session(session.id) == session


def test_open_store_refuses_an_unknown_scheme_without_echoing_the_url() -> None:
    with pytest.raises(StoreError, match="'mysql'") as caught:
        open_store("mysql://ops:hunter2@db.example/opsgate")
    assert "hunter2" not in str(caught.value)


def test_a_postgresql_url_goes_to_the_postgresql_backend() -> None:
    """Only the backend's own import is lazy: a URL never opens SQLite."""
    for url in ("postgresql://ops:hunter2@127.0.0.1:1/opsgate", "postgres://127.0.0.1:1/x"):
        try:
            store = open_store(url)
        except StoreError as exc:  # the backend is not installed: the error names the scheme
            assert url.split("://")[0] in str(exc) and "hunter2" not in str(exc)
            continue
        assert not isinstance(store, SQLiteStore)
        assert isinstance(store, Store)
