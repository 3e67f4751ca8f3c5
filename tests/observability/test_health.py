"""`/healthz`, `/readyz` and `/metrics` over real loopback HTTP: standalone, and on an app."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families
from slack_sdk.socket_mode.aiohttp import SocketModeClient

from bot.observability import (
    HealthServerError,
    Metrics,
    ReadinessCheck,
    add_health_routes,
    health_app,
    serve_health,
    socket_mode_check,
)


def ok() -> ReadinessCheck:
    async def check() -> str | None:
        return None

    return check


def failing(reason: str) -> ReadinessCheck:
    async def check() -> str | None:
        return reason

    return check


def scrape(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_standalone_server_answers_all_three(http: httpx.AsyncClient) -> None:
    metrics = Metrics(tools=["run_command"])
    metrics.run_finished("completed")
    metrics.decision("approved", 4.0)
    metrics.tool_finished("run_command", "ok", 0.3)
    refreshed = 0

    async def refresh() -> None:  # as the app does: gauges from the database, per scrape
        nonlocal refreshed
        refreshed += 1
        metrics.set_pending_approvals(5)

    app = health_app(metrics, {"database": ok(), "slack": ok()}, refresh=refresh)
    async with serve_health(port=0, host="127.0.0.1", app=app) as server:
        assert server.port > 0
        health = await http.get(f"{server.url}/healthz")
        assert (health.status_code, health.json()) == (200, {"ok": True})

        ready = await http.get(f"{server.url}/readyz")
        assert (ready.status_code, ready.json()) == (200, {"ready": True})

        page = await http.get(f"{server.url}/metrics")
        assert page.status_code == 200
        assert page.headers["content-type"] == CONTENT_TYPE_LATEST
        values = scrape(page.text)
        assert refreshed == 1
        assert values[("opsgate_runs_total", (("outcome", "completed"),))] == 1
        assert values[("opsgate_decisions_total", (("decision", "approved"),))] == 1
        labels = (("outcome", "approved"), ("rule", "default"))
        assert values[("opsgate_decision_seconds_count", labels)] == 1
        assert values[("opsgate_pending_approvals", ())] == 5
        key = ("opsgate_tool_seconds_count", (("outcome", "ok"), ("tool", "run_command")))
        assert values[key] == 1

    with pytest.raises(httpx.ConnectError):  # the block's end stopped the server
        await http.get(f"{server.url}/healthz")


async def test_not_ready_lists_every_reason(http: httpx.AsyncClient) -> None:
    never = asyncio.Event()

    async def hangs() -> str | None:
        await never.wait()
        return None

    async def raises() -> str | None:
        raise ConnectionError("cannot reach postgresql://opsgate:hunter2@db/opsgate")

    checks = {
        "fine": ok(),
        "database": failing("the database does not accept writes: disk I/O error"),
        "slow": hangs,
        "broken": raises,
    }
    app = health_app(Metrics(), checks, timeout=0.2)
    async with serve_health(port=0, host="127.0.0.1", app=app) as server:
        ready = await http.get(f"{server.url}/readyz")
        health = await http.get(f"{server.url}/healthz")

    assert ready.status_code == 503
    body = ready.json()
    assert body["ready"] is False
    assert sorted(body["reasons"]) == [
        "broken: ConnectionError: cannot reach postgresql://opsgate:***@db/opsgate",
        "database: the database does not accept writes: disk I/O error",
        "slow: no answer within 0.2s",
    ]
    assert health.status_code == 200  # alive, only not ready


async def test_notes_are_told_without_making_the_bot_unready(http: httpx.AsyncClient) -> None:
    async def quarantined() -> list[str]:
        return ["MCP tool net__lookup changed since it was reviewed"]

    async def nothing() -> list[str]:
        return []

    async def broken() -> list[str]:
        raise ConnectionError("cannot reach postgresql://opsgate:hunter2@db/opsgate")

    notes = {"mcp": quarantined, "quiet": nothing, "broken": broken}
    app = health_app(Metrics(), {"database": ok()}, notes=notes)
    async with serve_health(port=0, host="127.0.0.1", app=app) as server:
        ready = await http.get(f"{server.url}/readyz")
    assert ready.status_code == 200
    body = ready.json()
    assert body["ready"] is True
    assert sorted(body["notes"]) == [
        "broken: ConnectionError: cannot reach postgresql://opsgate:***@db/opsgate",
        "mcp: MCP tool net__lookup changed since it was reviewed",
    ]

    unready = health_app(Metrics(), {"database": failing("disk full")}, notes=notes)
    async with serve_health(port=0, host="127.0.0.1", app=unready) as server:
        answer = await http.get(f"{server.url}/readyz")
    assert answer.status_code == 503
    assert answer.json()["reasons"] == ["database: disk full"]
    assert "mcp: MCP tool net__lookup changed since it was reviewed" in answer.json()["notes"]

    plain = health_app(Metrics(), {"database": ok()}, notes={"quiet": nothing})
    async with serve_health(port=0, host="127.0.0.1", app=plain) as server:
        assert (await http.get(f"{server.url}/readyz")).json() == {"ready": True}


async def test_socket_mode_check_reports_a_closed_connection(http: httpx.AsyncClient) -> None:
    client = SocketModeClient(app_token="xapp-1-A0-test")  # never connected
    try:
        app = health_app(Metrics(), {"slack": socket_mode_check(client)})
        async with serve_health(port=0, host="127.0.0.1", app=app) as server:
            ready = await http.get(f"{server.url}/readyz")
    finally:
        await client.close()
    assert ready.status_code == 503
    assert ready.json()["reasons"] == ["slack: the Socket Mode connection to Slack is down"]


async def test_routes_join_an_existing_app(http: httpx.AsyncClient) -> None:
    async def slack_events(request: web.Request) -> web.Response:
        return web.json_response({"slack": True})

    app = web.Application()
    app.add_routes([web.post("/slack/events", slack_events)])
    metrics = Metrics()
    add_health_routes(app, metrics, {"database": ok()})
    metrics.slack_api_error("chat.postMessage")
    async with serve_health(port=0, host="127.0.0.1", app=app) as server:
        events = await http.post(f"{server.url}/slack/events")
        ready = await http.get(f"{server.url}/readyz")
        page = await http.get(f"{server.url}/metrics")
    assert events.json() == {"slack": True}
    assert ready.json() == {"ready": True}
    values = scrape(page.text)
    assert values[("opsgate_slack_api_errors_total", (("method", "chat.postMessage"),))] == 1


async def test_a_failed_refresh_still_serves_metrics(
    http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    async def refresh() -> None:
        raise RuntimeError("database gone")

    metrics = Metrics()
    metrics.set_queue_depth(7)
    app = health_app(metrics, refresh=refresh)
    async with serve_health(port=0, host="127.0.0.1", app=app) as server:
        page = await http.get(f"{server.url}/metrics")
    assert page.status_code == 200
    assert scrape(page.text)[("opsgate_queue_depth", ())] == 7
    assert "refreshing metrics before a scrape failed" in caplog.text


async def test_a_taken_port_is_a_one_line_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(HealthServerError) as info:
            async with serve_health(port=port, host="127.0.0.1", app=health_app(Metrics())):
                pytest.fail("served on a taken port")
    assert f"127.0.0.1:{port}" in str(info.value)
    assert "\n" not in str(info.value)
