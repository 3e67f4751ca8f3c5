"""`opsgate migrate`, `audit` and `check` against PostgreSQL, and `OPSGATE_DB` as a URL whose
password never shows (the private cluster trusts loopback, so any password connects)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.cli.check import run_check
from bot.errors import SettingsError
from bot.settings import DatabaseURL, Settings, load_settings
from bot.store import SCHEMA_VERSION, PostgresStore
from tests.support.postgres import postgres_cluster, postgres_url

__all__ = ["postgres_cluster", "postgres_url"]  # the fixtures this module uses

ROOT = Path(__file__).resolve().parents[2]
OPSGATE = Path(sys.executable).with_name("opsgate")
PASSWORD = "hunter2-SECRET"


def _with_password(url: str) -> str:
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{PASSWORD}@")


def _opsgate(args: list[str], db: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "OPENAI_", "OPSGATE_"))
    }
    env.update(PYTHONPATH=str(ROOT), OPSGATE_DB=db)
    return subprocess.run(
        [str(OPSGATE), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


async def test_migrate_is_idempotent_and_audit_reads_postgres(
    postgres_url: str, tmp_path: Path
) -> None:
    url = _with_password(postgres_url)
    first = await asyncio.to_thread(_opsgate, ["migrate"], url, tmp_path)
    assert first.returncode == 0, first.stderr
    assert f"from schema version 0 to {SCHEMA_VERSION}" in first.stdout
    again = await asyncio.to_thread(_opsgate, ["migrate"], url, tmp_path)
    assert again.returncode == 0, again.stderr
    assert f"is at schema version {SCHEMA_VERSION} (the latest)" in again.stdout
    async with PostgresStore(postgres_url) as store:
        await store.audit("decision", actor="U0BOB", details={"decision": "approved"})
    audit = await asyncio.to_thread(_opsgate, ["audit", "--json"], url, tmp_path)
    assert audit.returncode == 0, audit.stderr
    assert json.loads(audit.stdout)["actor"] == "U0BOB"
    assert "postgres:***@" in first.stdout
    for done in (first, again, audit):
        assert PASSWORD not in done.stdout + done.stderr


async def test_audit_of_an_empty_database_says_to_migrate(
    postgres_url: str, tmp_path: Path
) -> None:
    done = await asyncio.to_thread(_opsgate, ["audit"], _with_password(postgres_url), tmp_path)
    assert done.returncode == 1
    assert "holds no OpsGate data (run `opsgate migrate`)" in done.stderr
    assert PASSWORD not in done.stderr


def _settings(db: str) -> Settings:
    return Settings(
        slack_bot_token="xoxb-test",
        slack_api_url="http://127.0.0.1:9/api/",
        openai_base_url="http://127.0.0.1:9/v1",
        opsgate_model="m",
        opsgate_db=db,
        _env_file=None,
    )


async def test_check_reports_the_connection_and_the_schema_version(postgres_url: str) -> None:
    out = io.StringIO()
    await run_check(out=out, settings=_settings(_with_password(postgres_url)))
    [line] = [x for x in out.getvalue().splitlines() if "database:" in x]
    assert line.startswith("ok   database: postgresql://postgres:***@127.0.0.1:")
    assert (
        f"schema version 0; start-up (or `opsgate migrate`) brings it to {SCHEMA_VERSION}" in line
    )
    async with PostgresStore(postgres_url):
        pass  # migrates
    out = io.StringIO()
    await run_check(out=out, settings=_settings(_with_password(postgres_url)))
    assert f"schema version {SCHEMA_VERSION} (the latest)" in out.getvalue()
    assert PASSWORD not in out.getvalue()


async def test_check_fails_on_an_unreachable_database_without_the_password() -> None:
    out = io.StringIO()
    status = await run_check(
        out=out, settings=_settings(f"postgresql://ops:{PASSWORD}@127.0.0.1:9/opsgate")
    )
    assert status == 1
    [line] = [x for x in out.getvalue().splitlines() if "database:" in x]
    assert line.startswith("FAIL database: cannot open database 'postgresql://ops:***@127.0.0.1:9")
    assert PASSWORD not in out.getvalue()


def test_opsgate_db_takes_a_postgres_url_and_hides_its_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPSGATE_DB", f"postgres://ops:{PASSWORD}@db.internal:5432/opsgate")
    settings = load_settings(mode="audit", env_file=None)
    assert isinstance(settings.opsgate_db, DatabaseURL)
    assert settings.opsgate_db.get_secret_value().endswith(f":{PASSWORD}@db.internal:5432/opsgate")
    for shown in (repr(settings), str(settings), str(settings.opsgate_db)):
        assert PASSWORD not in shown
    assert str(settings.opsgate_db) == "postgres://ops:***@db.internal:5432/opsgate"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (f"mysql://ops:{PASSWORD}@db/opsgate", "OPSGATE_DB is a URL with the scheme 'mysql'"),
        (f"postgresql://ops:{PASSWORD}@db:port/x", "OPSGATE_DB is a postgresql:// URL with an"),
        (f"postgresql://ops:{PASSWORD}@/x", "OPSGATE_DB is a postgresql:// URL without a host"),
    ],
)
def test_a_bad_database_url_is_one_line_without_the_password(
    monkeypatch: pytest.MonkeyPatch, value: str, message: str
) -> None:
    monkeypatch.setenv("OPSGATE_DB", value)
    with pytest.raises(SettingsError) as error:
        load_settings(mode="audit", env_file=None)
    assert str(error.value).startswith(message)
    assert PASSWORD not in str(error.value)


def test_the_heartbeat_must_be_shorter_than_the_lease(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPSGATE_MODEL", "m")
    monkeypatch.setenv("OPSGATE_LEASE_SECONDS", "10")
    monkeypatch.setenv("OPSGATE_HEARTBEAT_SECONDS", "10")
    with pytest.raises(SettingsError, match=r"^OPSGATE_HEARTBEAT_SECONDS is not below"):
        load_settings(mode="chat", env_file=None)
    monkeypatch.setenv("OPSGATE_HEARTBEAT_SECONDS", "-1")
    with pytest.raises(SettingsError, match=r"^OPSGATE_HEARTBEAT_SECONDS is not a positive"):
        load_settings(mode="chat", env_file=None)
