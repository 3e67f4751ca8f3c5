"""App configuration: environment settings (bot/settings.py) and the Slack app manifest."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.errors import BotError, SettingsError
from bot.settings import Settings, load_settings

ROOT = Path(__file__).resolve().parent.parent

NAMES = (
    "SLACK_BOT_TOKEN",
    "SLACK_APP_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_API_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "OPSGATE_MODEL",
    "OPSGATE_DB",
    "OPSGATE_POLICY",
    "OPSGATE_PORT",
    "OPSGATE_CONTEXT_TOKENS",
)
BOT = "xoxb-1111-2222-SECRETBOTVALUE"
APP = "xapp-1-A111-SECRETAPPVALUE"
SIGNING = "8f742231b10e8888abcd99yyyzzz85a5"
OPENAI = "sk-SECRETOPENAIVALUE"


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """A clean environment in an empty working directory (no .env, no opsgate.toml)."""
    for name in NAMES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.chdir(tmp_path)
    return monkeypatch


def complete(env: pytest.MonkeyPatch, **changes: str | None) -> None:
    values: dict[str, str | None] = {
        "SLACK_BOT_TOKEN": BOT,
        "SLACK_APP_TOKEN": APP,
        "SLACK_SIGNING_SECRET": SIGNING,
        "OPENAI_API_KEY": OPENAI,
        "OPSGATE_MODEL": "gpt-4o-mini",
    }
    values.update(changes)
    for name, value in values.items():
        if value is None:
            env.delenv(name, raising=False)
        else:
            env.setenv(name, value)


def error_of(mode: str = "socket", env_file: str | None = None) -> SettingsError:
    with pytest.raises(SettingsError) as caught:
        load_settings(mode=mode, env_file=env_file)  # type: ignore[arg-type]
    error = caught.value
    message = str(error)
    assert "\n" not in message, message
    for secret in (BOT, APP, SIGNING, OPENAI, "SECRETUSER", "SECRETWRONG", "VALUE"):
        assert secret not in message and secret not in repr(error)
    # Nothing chained that a traceback would print (pydantic errors quote the input).
    assert error.__cause__ is None and error.__context__ is None
    return error


def test_defaults_and_values(env: pytest.MonkeyPatch) -> None:
    complete(env)
    settings = load_settings(mode="socket", env_file=None)
    assert settings.slack_bot_token.get_secret_value() == BOT
    assert settings.slack_app_token is not None
    assert settings.slack_app_token.get_secret_value() == APP
    assert settings.slack_api_url == "https://slack.com/api/"
    assert settings.openai_api_key.get_secret_value() == OPENAI
    assert settings.openai_base_url == "https://api.openai.com/v1"
    assert settings.opsgate_model == "gpt-4o-mini"
    assert settings.opsgate_db == Path("./opsgate.db")
    assert settings.opsgate_policy is None
    assert settings.opsgate_port == 3000


def test_optional_values_can_be_set(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "rules.toml").write_text("")
    complete(
        env,
        OPENAI_API_KEY=None,
        SLACK_API_URL="http://127.0.0.1:9999/api",
        OPENAI_BASE_URL="http://localhost:11434/v1",
        OPSGATE_DB=str(tmp_path / "state.db"),
        OPSGATE_POLICY="rules.toml",
        OPSGATE_PORT="8080",
    )
    settings = load_settings(mode="http", env_file=None)
    assert settings.openai_api_key.get_secret_value() == ""
    assert settings.slack_api_url == "http://127.0.0.1:9999/api/"  # slash added for slack_sdk
    assert settings.openai_base_url == "http://localhost:11434/v1"
    assert settings.opsgate_db == tmp_path / "state.db"
    assert settings.opsgate_policy == Path("rules.toml")
    assert settings.opsgate_port == 8080


def test_policy_defaults_to_opsgate_toml_when_present(
    env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    complete(env)
    (tmp_path / "opsgate.toml").write_text("")
    assert load_settings(mode="socket", env_file=None).opsgate_policy == Path("opsgate.toml")


def test_env_file_is_read(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "custom.env").write_text(
        f"SLACK_BOT_TOKEN={BOT}\nSLACK_APP_TOKEN={APP}\nOPSGATE_MODEL=llama3\n"
        "OPSGATE_PORT=4000\nUNRELATED=ignored\n"
    )
    settings = load_settings(mode="socket", env_file=str(tmp_path / "custom.env"))
    assert settings.slack_bot_token.get_secret_value() == BOT
    assert settings.opsgate_model == "llama3"
    assert settings.opsgate_port == 4000


def test_dot_env_in_working_directory_is_the_default(
    env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / ".env").write_text(f"SLACK_BOT_TOKEN={BOT}\nSLACK_APP_TOKEN={APP}\n")
    env.setenv("OPSGATE_MODEL", "from-env")
    settings = load_settings(mode="socket")
    assert settings.slack_bot_token.get_secret_value() == BOT
    assert settings.opsgate_model == "from-env"
    # The process environment wins over .env.
    (tmp_path / ".env").write_text(
        f"SLACK_BOT_TOKEN={BOT}\nSLACK_APP_TOKEN={APP}\nOPSGATE_MODEL=file"
    )
    assert load_settings(mode="socket").opsgate_model == "from-env"


def test_missing_bot_token(env: pytest.MonkeyPatch) -> None:
    complete(env, SLACK_BOT_TOKEN=None)
    error = error_of()
    assert str(error) == (
        "SLACK_BOT_TOKEN is missing: copy the Bot User OAuth Token (xoxb-…) from your Slack "
        "app's OAuth & Permissions page into .env"
    )
    assert isinstance(error, BotError)


def test_empty_value_counts_as_missing(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    complete(env, SLACK_BOT_TOKEN=None)
    (tmp_path / ".env").write_text("SLACK_BOT_TOKEN=\n")
    assert str(error_of(env_file=".env")).startswith("SLACK_BOT_TOKEN is missing:")


def test_malformed_bot_token(env: pytest.MonkeyPatch) -> None:
    complete(env, SLACK_BOT_TOKEN="xoxp-SECRETUSERTOKEN")
    message = str(error_of())
    assert message.startswith("SLACK_BOT_TOKEN must start with xoxb-, but this looks like a user")
    assert "OAuth & Permissions" in message
    assert "SECRETUSERTOKEN" not in message


def test_app_token_given_as_bot_token(env: pytest.MonkeyPatch) -> None:
    complete(env, SLACK_BOT_TOKEN=APP)
    assert "looks like an app-level token (SLACK_APP_TOKEN)" in str(error_of())


def test_socket_mode_needs_app_token(env: pytest.MonkeyPatch) -> None:
    complete(env, SLACK_APP_TOKEN=None)
    message = str(error_of("socket"))
    assert message.startswith("SLACK_APP_TOKEN is missing (Socket Mode needs it): ")
    assert "connections:write" in message and "--http" in message
    # HTTP mode does not need it.
    assert load_settings(mode="http", env_file=None).slack_app_token is None


def test_malformed_app_token(env: pytest.MonkeyPatch) -> None:
    complete(env, SLACK_APP_TOKEN="xoxb-SECRETWRONGKIND")
    message = str(error_of("socket"))
    assert message.startswith("SLACK_APP_TOKEN must start with xapp-, but this looks like a bot")


def test_http_mode_needs_signing_secret(env: pytest.MonkeyPatch) -> None:
    complete(env, SLACK_SIGNING_SECRET=None)
    message = str(error_of("http"))
    assert message.startswith("SLACK_SIGNING_SECRET is missing (HTTP mode needs it): ")
    assert "Basic Information" in message
    assert load_settings(mode="socket", env_file=None).slack_signing_secret is None


def test_missing_model(env: pytest.MonkeyPatch) -> None:
    complete(env, OPSGATE_MODEL=None)
    assert str(error_of()).startswith("OPSGATE_MODEL is missing: set it in .env to the model name")
    complete(env, OPSGATE_MODEL="   ")
    assert str(error_of()).startswith("OPSGATE_MODEL is missing: ")


def test_chat_mode_needs_no_slack_settings(env: pytest.MonkeyPatch) -> None:
    complete(env, SLACK_BOT_TOKEN=None, SLACK_APP_TOKEN=None, SLACK_SIGNING_SECRET=None)
    settings = load_settings(mode="chat", env_file=None)
    assert settings.slack_bot_token.get_secret_value() == ""
    assert settings.opsgate_model == "gpt-4o-mini"
    complete(env, OPSGATE_MODEL=None)
    assert str(error_of("chat")).startswith("OPSGATE_MODEL is missing: ")
    # A malformed token is still reported: it is a mistake whatever the mode.
    complete(env, SLACK_BOT_TOKEN="xoxp-SECRETUSER", OPSGATE_MODEL="m")
    assert str(error_of("chat")).startswith("SLACK_BOT_TOKEN must start with xoxb-")


def test_audit_mode_needs_only_the_database(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env.setenv("OPSGATE_DB", str(tmp_path / "audit.db"))
    assert load_settings(mode="audit", env_file=None).opsgate_db == tmp_path / "audit.db"


@pytest.mark.parametrize("port", ["abc", "0", "70000"])
def test_malformed_port(env: pytest.MonkeyPatch, port: str) -> None:
    complete(env, OPSGATE_PORT=port)
    assert str(error_of()) == (
        "OPSGATE_PORT is not a valid port number: set it to a port number between 1 and 65535, "
        "or leave it unset for 3000"
    )


@pytest.mark.parametrize("name", ["SLACK_API_URL", "OPENAI_BASE_URL"])
def test_malformed_urls(env: pytest.MonkeyPatch, name: str) -> None:
    complete(env, **{name: "slack.com/api"})
    assert str(error_of()).startswith(f"{name} must be an http:// or https:// URL: ")


def test_missing_policy_file_and_db_directory(env: pytest.MonkeyPatch) -> None:
    complete(env, OPSGATE_POLICY="nowhere.toml")
    assert str(error_of()).startswith(
        "OPSGATE_POLICY names a file that does not exist (nowhere.toml): "
    )
    complete(env, OPSGATE_POLICY=None, OPSGATE_DB="no/such/dir/opsgate.db")
    assert str(error_of()).startswith("OPSGATE_DB is in a directory that does not exist")


@pytest.mark.parametrize("mode", ["socket", "http", "chat", "audit"])
def test_db_that_is_a_directory_or_not_sqlite(
    env: pytest.MonkeyPatch, tmp_path: Path, mode: str
) -> None:
    complete(env, OPSGATE_DB=str(tmp_path))
    assert str(error_of(mode)).startswith(f"OPSGATE_DB is a directory ({tmp_path}): ")
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database", encoding="utf-8")
    complete(env, OPSGATE_DB=str(notes))
    assert str(error_of(mode)).startswith(f"OPSGATE_DB is not an SQLite database ({notes}): ")


def test_db_may_be_new_empty_or_sqlite(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    db = tmp_path / "opsgate.db"
    complete(env, OPSGATE_DB=str(db))
    assert load_settings(mode="socket", env_file=None).opsgate_db == db  # created at start-up
    db.touch()  # SQLite takes an empty file as a new database
    assert load_settings(mode="socket", env_file=None).opsgate_db == db
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE t (x)")
    assert load_settings(mode="socket", env_file=None).opsgate_db == db


def test_several_problems_still_one_line(env: pytest.MonkeyPatch) -> None:
    complete(env, SLACK_BOT_TOKEN=None, OPSGATE_MODEL=None, OPSGATE_PORT="x")
    message = str(error_of())
    assert message.startswith("SLACK_BOT_TOKEN is missing: ")
    assert message.endswith("(also check OPSGATE_MODEL, OPSGATE_PORT)")


def test_secrets_do_not_show_in_repr_or_str(env: pytest.MonkeyPatch) -> None:
    complete(env)
    settings = load_settings(mode="socket", env_file=None)
    for shown in (repr(settings), str(settings), repr(settings.model_dump())):
        for secret in (BOT, APP, SIGNING, OPENAI):
            assert secret not in shown
    assert "**********" in repr(settings)
    assert isinstance(settings, Settings)


# -- manifest.yml ------------------------------------------------------------------------------


def load_manifest() -> dict[str, Any]:
    manifest = yaml.safe_load((ROOT / "manifest.yml").read_text(encoding="utf-8"))
    assert isinstance(manifest, dict)
    return manifest


def test_manifest_has_what_the_bot_needs() -> None:
    manifest = load_manifest()
    assert manifest["display_information"]["name"] == "OpsGate"
    features = manifest["features"]
    assert features["bot_user"]["always_online"] is True
    assert features["app_home"]["messages_tab_enabled"] is True
    assert features["app_home"]["messages_tab_read_only_enabled"] is False
    assert features["slash_commands"] == [
        {
            "command": "/opsgate",
            "description": "Ask OpsGate to do something; risky steps wait for approval",
            "usage_hint": "[what you need done]",
            "should_escape": False,
        }
    ]
    assert set(manifest["oauth_config"]["scopes"]["bot"]) == {
        "app_mentions:read",
        "assistant:write",  # the AI-app container
        "chat:write",
        "channels:history",
        "channels:read",  # the Home tab: who is in a channel where anyone approves
        "groups:history",
        "groups:read",
        "im:history",
        "mpim:history",
        "reactions:write",
        "files:write",
        "usergroups:read",
        "users:read",  # users.lookupByEmail needs it with users:read.email
        "users:read.email",  # PagerDuty's on-call, by email, to a Slack user
        "commands",
    }
    settings = manifest["settings"]
    assert settings["event_subscriptions"]["bot_events"] == [
        "app_mention",
        "message.channels",
        "message.groups",
        "message.im",
        "message.mpim",
        "app_home_opened",  # the Home tab, and the agent's Messages tab opened
        "app_context_changed",  # the agent messaging experience: the channel looked at
        "member_joined_channel",  # the Home tab's channel members
        "member_left_channel",
    ]
    # The Home tab and the message shortcut.
    assert features["app_home"]["home_tab_enabled"] is True
    assert features["shortcuts"] == [
        {
            "name": "Ask OpsGate about this message",
            "type": "message",
            "callback_id": "opsgate_ask",
            "description": "Start an OpsGate run in this message's thread, with the message "
            "as context",
        }
    ]
    assert settings["interactivity"] == {"is_enabled": True}
    assert settings["socket_mode_enabled"] is True
    assert settings["org_deploy_enabled"] is False
    assert settings["token_rotation_enabled"] is False
