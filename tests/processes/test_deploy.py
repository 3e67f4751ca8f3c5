"""The deployment files say what the README promises (no docker or systemd needed to check)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from bot.observability import Metrics, health_app, serve_health
from bot.settings import Settings

ROOT = Path(__file__).resolve().parents[2]

VARIABLES = [
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
    "OPSGATE_LOG_FORMAT",
    "OPSGATE_LOG_LEVEL",
    "OPSGATE_CONTEXT_TOKENS",
]


def dockerfile() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    text = (ROOT / "Dockerfile").read_text()
    text = re.sub(r"\\\n\s*", " ", text)
    return [line.strip() for line in text.splitlines() if line.strip() and line[0] != "#"]


def instruction(name: str) -> list[str]:
    return [line[len(name) + 1 :] for line in dockerfile() if line.split()[0] == name]


def test_dockerfile_runs_as_a_non_root_user_with_a_healthcheck() -> None:
    assert instruction("FROM") == ["python:3.11-slim"]
    users = instruction("USER")
    assert users and users[-1] not in ("root", "0")
    assert any("pip install ." in run for run in instruction("RUN"))
    assert json.loads(instruction("CMD")[-1]) == ["opsgate", "run"]
    assert instruction("EXPOSE") == ["3000"]
    assert instruction("VOLUME")
    assert len(instruction("HEALTHCHECK")) == 1


def healthcheck_command() -> list[str]:
    line = instruction("HEALTHCHECK")[0]
    command: list[str] = json.loads(line[line.index("CMD ") + 4 :])
    assert command[0] == "python"
    return [sys.executable, *command[1:]]


async def run_healthcheck(port: int) -> tuple[int, bytes]:
    """The image's HEALTHCHECK command, run here (the server shares this event loop)."""
    process = await asyncio.create_subprocess_exec(
        *healthcheck_command(),
        env={**os.environ, "OPSGATE_PORT": str(port)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(30):
        _, stderr = await process.communicate()
    assert process.returncode is not None
    return process.returncode, stderr


async def test_the_image_healthcheck_passes_against_healthz_and_fails_without_it() -> None:
    app = health_app(Metrics())
    async with serve_health(port=0, host="127.0.0.1", app=app) as server:
        alive, stderr = await run_healthcheck(server.port)
    assert alive == 0, stderr
    dead, _ = await run_healthcheck(server.port)  # the same port, now closed
    assert dead != 0


def test_dockerignore_keeps_secrets_and_state_out_of_the_image() -> None:
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    assert ".env" in ignored
    assert "*.db" in ignored
    assert ".git" in ignored


def test_compose_runs_the_bot_against_a_healthy_postgres() -> None:
    compose: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
    bot, postgres = compose["services"]["bot"], compose["services"]["postgres"]
    assert postgres["image"] == "postgres:15"
    assert postgres["healthcheck"]["test"]
    assert bot["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert bot["environment"]["OPSGATE_DB"].startswith("postgresql://")
    assert "@postgres:5432/" in bot["environment"]["OPSGATE_DB"]
    assert bot["env_file"] == ".env"
    assert bot["build"] == "."
    assert bot["deploy"]["replicas"] >= 2


def systemd_unit() -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in (ROOT / "deploy" / "opsgate.service").read_text().splitlines():
        if "=" in line and not line.startswith(("#", ";")):
            key, _, value = line.partition("=")
            settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def test_systemd_unit_is_hardened() -> None:
    unit = systemd_unit()
    for key, value in {
        "User": "opsgate",
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "StateDirectory": "opsgate",
        "Restart": "on-failure",
        "KillSignal": "SIGTERM",
    }.items():
        assert unit.get(key) == [value], key
    assert "OPSGATE_DB=/var/lib/opsgate/opsgate.db" in unit["Environment"]
    assert unit["EnvironmentFile"]
    assert int(unit["TimeoutStopSec"][0]) > 30  # longer than the bot's own 30 s grace
    assert unit["ExecStart"][0].endswith("opsgate run")


def test_env_example_names_every_variable() -> None:
    text = (ROOT / ".env.example").read_text()
    named = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", text, flags=re.MULTILINE))
    assert set(VARIABLES) <= named
    assert {name.upper() for name in Settings.model_fields} <= named
    assert not re.search(r"xox[bp]-\d|xapp-\d|sk-[A-Za-z0-9]{8}", text)  # placeholders only


def test_license_is_mit() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License")
    assert "Copyright (c) 2026 OpsGate authors" in text
