"""Building the Bolt app: the Web API client carries the token, and Bolt says nothing about it."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from tests.support.harness import running_bot, texts

UNUSED_TOKEN = "token` will be unused"


async def test_start_logs_no_unused_token_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every start used to log `As you gave client as well, token will be unused`: Bolt read
    SLACK_BOT_TOKEN from the environment next to the client it was given."""
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-from-the-environment")
    with caplog.at_level(logging.INFO, logger="opsgate.bolt"):
        async with running_bot(tmp_path) as bot:
            bot.llm.reply_text("hi")
            await bot.mention("hello")
            await bot.settle()
            assert "hi" in " ".join(texts(bot.slack))  # answered, on the client's token
    bolt = [r.getMessage() for r in caplog.records if r.name.startswith("opsgate.bolt")]
    assert not [m for m in bolt if UNUSED_TOKEN in m], bolt
    assert os.environ["SLACK_BOT_TOKEN"] == "xoxb-from-the-environment"
