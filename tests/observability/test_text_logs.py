"""Text log lines cannot be forged: control characters in any field (a provider's error, an
event field, a run id, an exception's message) are escaped, through the logging module as the
bot configures it. A forged line would start with a timestamp of its own."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest

from bot.observability import QUIET_LIBRARIES, configure_logging, log_context, log_event

TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")
FORGED = "2026-03-02 10:15:04,120 INFO opsgate.events: decision decision=approved by=U0BOSS"


@pytest.fixture
def logs() -> Iterator[io.StringIO]:
    """Text logging into a buffer, as `opsgate run` sets it up; restored afterwards."""
    root = logging.getLogger()
    saved = root.level, {name: logging.getLogger(name).level for name in QUIET_LIBRARIES}
    stream = io.StringIO()
    handler = configure_logging("text", "INFO", stream=stream, secrets=["signing-secret-123"])
    yield stream
    root.removeHandler(handler)
    root.setLevel(saved[0])
    for name, level in saved[1].items():
        logging.getLogger(name).setLevel(level)


def records(stream: io.StringIO) -> list[str]:
    """The output split where a terminal or `grep` would split it (str.splitlines also breaks
    at \\x85, \\u2028 and the other Unicode line ends)."""
    return stream.getvalue().splitlines()


def test_a_provider_error_with_a_newline_stays_on_its_line(logs: io.StringIO) -> None:
    error = f"upstream said: bad request\n{FORGED}"
    logging.getLogger("opsgate.runner").error("model request failed: %s", error)
    [line] = records(logs)
    assert line.endswith(f"model request failed: upstream said: bad request\\n{FORGED}")


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("a\r\nb", "a\\r\\nb"),
        ("tab\there", "tab\\there"),
        ("\x1b[2K\x1b[1Gerased", "\\x1b[2K\\x1b[1Gerased"),  # a terminal escape: line erased
        ("nul\x00del\x7f", "nul\\x00del\\x7f"),
        ("next\x85line", "next\\x85line"),  # C1: NEL
        ("csi\x9bJ", "csi\\x9bJ"),
        ("line\u2028para\u2029end", "line\\u2028para\\u2029end"),
        ("user \u202eNIMDA\u202c ok", "user \\u202eNIMDA\\u202c ok"),  # right-to-left override
        (
            "\u2066isolate\u2069 \u200emark\u200f \u061c",
            "\\u2066isolate\\u2069 \\u200emark\\u200f \\u061c",
        ),
        ("é 漢字 🚀 `code` C:\\path", "é 漢字 🚀 `code` C:\\path"),  # printable text is kept
    ],
)
def test_every_control_character_is_escaped(logs: io.StringIO, raw: str, shown: str) -> None:
    logging.getLogger("opsgate.runner").warning("said %s", raw)
    [line] = records(logs)
    assert line.endswith(f"opsgate.runner: said {shown}")


def test_event_fields_and_run_ids_are_escaped(logs: io.StringIO) -> None:
    with log_context(session="S1\nS2", thread="17.1\u202e"):
        log_event("tool.executed", tool="run_command", outcome=f"ok\n{FORGED}", call="C1\r")
    [line] = records(logs)
    assert TIMESTAMP.match(line)
    assert f"outcome='ok\\n{FORGED}'" in line
    assert line.endswith("[session=S1\\nS2 thread=17.1\\u202e call=C1\\r]")


def test_a_traceback_keeps_its_lines_but_no_message_breaks_one(logs: io.StringIO) -> None:
    try:
        try:
            raise ConnectionError(f"reset\n{FORGED}")
        except ConnectionError as cause:
            raise RuntimeError(f"provider error 500:\n{FORGED}") from cause
    except RuntimeError:
        logging.getLogger("opsgate.runner").exception("turn failed\n%s", FORGED)
    lines = records(logs)
    assert [line for line in lines if TIMESTAMP.match(line)] == [lines[0]]  # one record
    assert lines[0].endswith(f"turn failed\\n{FORGED}")
    assert lines[1] == "Traceback (most recent call last):"
    assert f"ConnectionError: reset\\n{FORGED}" in lines
    assert f"RuntimeError: provider error 500:\\n{FORGED}" in lines
    assert "The above exception was the direct cause of the following exception:" in lines
    assert not [line for line in lines if line.startswith(FORGED[:10])]


def test_notes_and_exception_groups_are_escaped(logs: io.StringIO) -> None:
    inner = ValueError(f"bad\n{FORGED}")
    inner.add_note(f"note\n{FORGED}")
    try:
        raise ExceptionGroup("two failed", [inner, KeyError("k\u2028")])
    except ExceptionGroup:
        logging.getLogger("opsgate.runner").exception("group")
    lines = records(logs)
    assert [line for line in lines if TIMESTAMP.match(line)] == [lines[0]]
    assert not [line for line in lines if FORGED in line and f"\\n{FORGED}" not in line]
    assert f"    | ValueError: bad\\n{FORGED}\\nnote\\n{FORGED}" in lines
    assert "    | KeyError: 'k\\u2028'" in lines


def test_secrets_are_still_masked(logs: io.StringIO) -> None:
    try:
        raise RuntimeError("token xoxb-1-2-secret\nand signing-secret-123")
    except RuntimeError:
        logging.getLogger("opsgate.runner").exception("with key sk-abcdefghijklmnop\n")
    text = logs.getvalue()
    assert "RuntimeError: token xoxb-***\\nand ***" in text.splitlines()
    assert text.splitlines()[0].endswith("with key sk-***\\n")
    assert "xoxb-1-2-secret" not in text and "signing-secret-123" not in text


def test_json_lines_carry_the_text_unchanged() -> None:
    """JSON escapes the line breaks itself: the value a pipeline reads is the raw text."""
    root = logging.getLogger()
    level = root.level
    stream = io.StringIO()
    handler = configure_logging("json", "INFO", stream=stream)
    try:
        logging.getLogger("opsgate.runner").error("failed: %s", f"x\n{FORGED}\u202e")
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    [line] = stream.getvalue().split("\n")[:-1]
    assert json.loads(line)["message"] == f"failed: x\n{FORGED}\u202e"
