"""The SQLite file under a running bot, through the real app over loopback HTTP: a file deleted
or replaced (or its WAL deleted) makes `/readyz` answer 503, says why in the log, and stops
decisions (the clicker is told nothing was saved) instead of writing to an unlinked inode; a new
database is created readable by its owner only."""

from __future__ import annotations

import logging
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.scenarios.test_app import ALICE, BOB, make_tools
from tests.support.harness import Bot, running_bot


def _delete(db: Path) -> None:
    db.unlink()


def _replace(db: Path) -> None:
    copy = db.with_name("copy.db")
    shutil.copyfile(db, copy)
    os.replace(copy, db)


def _delete_wal(db: Path) -> None:
    db.with_name(db.name + "-wal").unlink()


async def _paused(bot: Bot) -> str:
    bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "echo kept"})])
    await bot.mention("run it", user=ALICE)
    [card] = await bot.wait_cards(1)
    return str(card["ledger_id"])


@pytest.mark.parametrize("change", [_delete, _replace, _delete_wal], ids=lambda f: f.__name__)
async def test_a_database_file_changed_under_the_bot_fails_readiness_and_stops_decisions(
    tmp_path: Path, change: Callable[[Path], None], caplog: pytest.LogCaptureFixture
) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path)) as bot:
        ledger_id = await _paused(bot)
        assert (await bot.http.get(f"{bot.url}/readyz")).status_code == 200
        change(tmp_path / "opsgate.db")
        with caplog.at_level(logging.ERROR, logger="bot.store"):
            ready = await bot.http.get(f"{bot.url}/readyz")
        assert ready.status_code == 503
        assert any(
            "opsgate.db" in r.getMessage() and "restart OpsGate" in r.getMessage()
            for r in caplog.records
        ), [r.getMessage() for r in caplog.records]

        response = await bot.click("opsgate_approve", ledger_id, user=BOB)
        assert response.status_code == 200
        [told] = await bot.slack.wait_for("chat.postEphemeral")
        assert told.params["user"] == BOB and "couldn't save your click" in told.params["text"]
        await bot.settle()
        row = await bot.deps.store.get_call(ledger_id)
        assert row is not None and row.status == "pending"
        assert len(bot.llm.requests) == 1  # nothing ran


async def test_a_new_database_is_private_to_its_owner(tmp_path: Path) -> None:
    old = os.umask(0o022)  # the Docker image's
    try:
        async with running_bot(tmp_path / "state", tools=make_tools(tmp_path)):
            pass
    finally:
        os.umask(old)
    state = tmp_path / "state"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    for name in ("opsgate.db", "opsgate.db.lock"):
        assert stat.S_IMODE((state / name).stat().st_mode) == 0o600, name
