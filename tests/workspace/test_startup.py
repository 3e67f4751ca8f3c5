"""What `opsgate run` decides before the local workspace starts: it needs no Slack settings and
no model, a malformed token still stops it, and the bot is pointed at the workspace; and the
workspace's state outlives its process."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.errors import SettingsError
from bot.settings import Settings, load_settings
from bot.workspace import local_settings
from bot.workspace.startup import DEMO_MODEL
from bot.workspace.state import OpenView, WorkspaceState, state_path


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    for name in list(Settings.model_fields):
        monkeypatch.delenv(name.upper(), raising=False)
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return monkeypatch


def test_the_workspace_needs_neither_slack_settings_nor_a_model(env: pytest.MonkeyPatch) -> None:
    settings = load_settings(mode="workspace", env_file=None)
    assert settings.slack_bot_token.get_secret_value() == ""
    with pytest.raises(SettingsError, match="SLACK_BOT_TOKEN"):
        load_settings(mode="socket", env_file=None)


def test_a_malformed_token_stops_it_rather_than_opening_the_workspace(
    env: pytest.MonkeyPatch,
) -> None:
    env.setenv("SLACK_BOT_TOKEN", "xoxp-a-user-token")
    with pytest.raises(SettingsError, match="SLACK_BOT_TOKEN must start with xoxb-"):
        load_settings(mode="workspace", env_file=None)


def test_the_bot_is_pointed_at_the_workspace(env: pytest.MonkeyPatch) -> None:
    base = "http://127.0.0.1:3000"
    local = local_settings(load_settings(mode="workspace", env_file=None), base, secret="s3")
    assert local.slack_api_url == f"{base}/api/"
    assert local.slack_bot_token.get_secret_value().startswith("xoxb-local-")
    assert local.slack_signing_secret is not None
    assert local.slack_signing_secret.get_secret_value() == "s3"
    assert (local.opsgate_model, local.openai_base_url) == (DEMO_MODEL, f"{base}/demo/v1")
    env.setenv("OPSGATE_MODEL", "gpt-4o-mini")
    env.setenv("OPENAI_BASE_URL", "http://localhost:11434/v1")
    real = local_settings(load_settings(mode="workspace", env_file=None), base, secret="s3")
    assert (real.opsgate_model, real.openai_base_url) == (
        "gpt-4o-mini",
        "http://localhost:11434/v1",
    )


async def test_the_state_outlives_the_process(tmp_path: Path) -> None:
    path = state_path(tmp_path / "opsgate.db")
    assert path == tmp_path / "opsgate-workspace.db"
    state = WorkspaceState(path)
    ts = state.next_ts()
    state.put("C0OPS", {"type": "message", "text": "waiting card", "ts": ts, "streaming": True})
    state.put_view(OpenView("V1", "U0SAM", {"type": "modal", "callback_id": "x"}))
    state.close()
    again = WorkspaceState(path)
    try:
        message = again.message("C0OPS", ts)
        assert message is not None and message["text"] == "waiting card"
        assert "streaming" not in message  # no stream outlives its process
        assert again.modal_of("U0SAM") == OpenView(
            "V1", "U0SAM", {"type": "modal", "callback_id": "x"}
        )
        assert float(again.next_ts()) > float(ts)
    finally:
        again.close()
