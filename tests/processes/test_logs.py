"""Logs as operators read them: JSON lines (or text) on stderr of a real process, with run ids,
events, tracebacks, no secrets and no library chatter at the default level."""

from __future__ import annotations

import asyncio
import functools
import io
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.observability import (
    QUIET_LIBRARIES,
    LogSettingError,
    configure_logging,
    current_log_context,
    log_context,
    mask_secrets,
)

ROOT = Path(__file__).resolve().parents[2]

# A whole program: it logs the way the bot does, and makes one real HTTP request with httpx,
# whose "HTTP Request: ..." INFO line is the chatter that must stay out.
CHILD = """
import http.server, logging, sys, threading
import httpx
from bot.observability import configure_logging, log_context, log_event

configure_logging(sys.argv[1], sys.argv[2], secrets=["signing-secret-value-123"])

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *args):
        pass

server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
httpx.get(f"http://127.0.0.1:{server.server_port}/")
server.shutdown()

log = logging.getLogger("opsgate.runner")
log.info("plain line")
with log_context(session="S1", thread="T1"):
    log.info("in a run")
    with log_context(call="C1"):
        log_event("tool.executed", tool="run_command", outcome="ok", seconds=0.25)
    try:
        1 / 0
    except ZeroDivisionError:
        log.exception("tool failed with token %s", "xoxb-123-456-abc")
log.warning("key sk-abcdefghijklmnop, secret signing-secret-value-123, postgresql://u:pw@db/x")
log_event("decision", decision="approved", message="collides", call="C9")
log.debug("debug line")
"""


@functools.cache  # each combination runs once per session; the tests only read its output
def run_child(fmt: str, level: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", CHILD, fmt, level],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def test_json_logs_are_one_object_per_line_on_stderr() -> None:
    done = run_child("json", "INFO")
    assert done.stdout == ""
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    for line in lines:
        assert {"ts", "level", "logger", "message"} <= line.keys()
    by_message = {line["message"]: line for line in lines}
    loggers = [line["logger"] for line in lines]
    assert loggers == ["opsgate.runner"] * 2 + ["opsgate.events"] + ["opsgate.runner"] * 2 + [
        "opsgate.events"
    ]

    plain = by_message["plain line"]
    assert plain["level"] == "INFO"
    assert not {"session", "thread", "call"} & plain.keys()

    assert by_message["in a run"]["session"] == "S1"
    assert by_message["in a run"]["thread"] == "T1"
    assert "call" not in by_message["in a run"]

    event = next(line for line in lines if line.get("event") == "tool.executed")
    assert (event["session"], event["thread"], event["call"]) == ("S1", "T1", "C1")
    assert (event["tool"], event["outcome"], event["seconds"]) == ("run_command", "ok", 0.25)
    assert event["message"] == "tool.executed tool=run_command outcome=ok seconds=0.25"

    failed = next(line for line in lines if line["level"] == "ERROR")
    assert failed["message"] == "tool failed with token xoxb-***"
    assert failed["exc"].startswith("Traceback") and "ZeroDivisionError" in failed["exc"]
    assert failed["session"] == "S1" and "call" not in failed

    # A field named like a core key keeps both; an explicit call id overrides the context's.
    decision = next(line for line in lines if line.get("event") == "decision")
    assert decision["field_message"] == "collides"
    assert decision["call"] == "C9"

    assert "abcdefghijklmnop" not in done.stderr
    assert "signing-secret-value-123" not in done.stderr
    assert ":pw@" not in done.stderr
    assert "sk-***, secret ***, postgresql://u:***@db/x" in done.stderr


def test_library_chatter_shows_only_at_debug() -> None:
    quiet = [json.loads(line) for line in run_child("json", "INFO").stderr.splitlines()]
    assert not [line for line in quiet if line["logger"].startswith(("httpx", "httpcore"))]
    assert not [line for line in quiet if line["level"] == "DEBUG"]

    loud = [json.loads(line) for line in run_child("json", "DEBUG").stderr.splitlines()]
    assert any(line["logger"] == "httpx" and "HTTP Request" in line["message"] for line in loud)
    assert any(line["message"] == "debug line" for line in loud)


def test_text_logs_carry_the_ids_on_the_message_line() -> None:
    lines = run_child("text", "INFO").stderr.splitlines()
    assert any(line.endswith("opsgate.runner: plain line") for line in lines)
    assert any(line.endswith("opsgate.runner: in a run [session=S1 thread=T1]") for line in lines)
    assert any(
        "tool.executed tool=run_command outcome=ok seconds=0.25 [session=S1 thread=T1 call=C1]"
        in line
        for line in lines
    )
    error = next(i for i, line in enumerate(lines) if " ERROR " in line)
    assert lines[error].endswith("tool failed with token xoxb-*** [session=S1 thread=T1]")
    assert lines[error + 1] == "Traceback (most recent call last):"
    assert not any("HTTP Request" in line for line in lines)


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """JSON logging into a buffer, and the root and library loggers restored afterwards."""
    root = logging.getLogger()
    saved = root.level, {name: logging.getLogger(name).level for name in QUIET_LIBRARIES}
    stream = io.StringIO()
    handler = configure_logging("json", "INFO", stream=stream)
    yield stream
    root.removeHandler(handler)
    root.setLevel(saved[0])
    for name, level in saved[1].items():
        logging.getLogger(name).setLevel(level)


def read(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


async def test_concurrent_runs_keep_their_own_ids(captured: io.StringIO) -> None:
    both_inside = asyncio.Barrier(2)

    async def run(session: str) -> None:
        with log_context(session=session, thread=f"T-{session}"):
            await both_inside.wait()  # both contexts are set at once
            logging.getLogger("opsgate.runner").info("working on %s", session)

    await asyncio.gather(run("A"), run("B"))
    lines = {line["message"]: line for line in read(captured)}
    assert lines["working on A"]["session"] == "A" and lines["working on A"]["thread"] == "T-A"
    assert lines["working on B"]["session"] == "B" and lines["working on B"]["thread"] == "T-B"
    assert current_log_context() == {}


def test_a_second_configuration_replaces_the_first(captured: io.StringIO) -> None:
    second = io.StringIO()
    handler = configure_logging("text", "WARNING", stream=second)
    try:
        logging.getLogger("opsgate").warning("once")
        logging.getLogger("opsgate").info("filtered")
        logging.getLogger("httpx").warning("a library warning still shows")
    finally:
        logging.getLogger().removeHandler(handler)
    assert captured.getvalue() == ""
    assert second.getvalue().count("once") == 1
    assert "filtered" not in second.getvalue()
    assert "a library warning still shows" in second.getvalue()


def test_nested_context_restores_the_outer_ids() -> None:
    with log_context(session="S", call="C1"):
        with log_context(call="C2"):
            assert current_log_context() == {"session": "S", "call": "C2"}
        assert current_log_context() == {"session": "S", "call": "C1"}
    assert current_log_context() == {}


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("token xoxb-1-2-abc here", "token xoxb-*** here"),
        ("xapp-1-A0-xyz", "xapp-***"),
        ("Bearer sk-proj-abcdefgh12345", "Bearer sk-***"),
        ("pip install sk-learn", "pip install sk-learn"),  # too short to be a key
        ("task-list and desk-xoxb", "task-list and desk-xoxb"),
        (
            "postgresql://opsgate:hunter2@db:5432/opsgate",
            "postgresql://opsgate:***@db:5432/opsgate",
        ),
        ("https://example.com/a:b@c", "https://example.com/a:b@c"),
    ],
)
def test_mask_secrets(text: str, masked: str) -> None:
    assert mask_secrets(text) == masked


@pytest.mark.parametrize(("fmt", "level"), [("yaml", "INFO"), ("json", "LOUD")])
def test_unknown_settings_are_one_line_errors(fmt: str, level: str) -> None:
    with pytest.raises(LogSettingError) as info:
        configure_logging(fmt, level, stream=io.StringIO())
    assert "\n" not in str(info.value)
    assert repr(fmt if fmt == "yaml" else level) in str(info.value)
