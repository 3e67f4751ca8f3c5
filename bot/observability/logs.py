"""Logging set-up: text or one JSON object per line on stderr, the run's ids on every line.

`configure_logging` is called once at start-up (`OPSGATE_LOG_FORMAT`, `OPSGATE_LOG_LEVEL`);
`log_context` marks the run being worked on, so every line logged inside it, by any module,
carries its session, thread and call ids; `log_event` logs a run, decision or tool execution as
an event with fields a log pipeline can query.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterable, Iterator
from typing import Any, Final, Literal, TextIO, get_args

from bot.errors import LogSettingError

from ._logformat import (
    EVENT_ATTR,
    FIELDS_ATTR,
    ContextFilter,
    JsonFormatter,
    SecretFilter,
    TextFormatter,
    context_vars,
    mask_secrets,
)

__all__ = [
    "EVENTS_LOGGER",
    "QUIET_LIBRARIES",
    "LogFormat",
    "LogLevel",
    "configure_logging",
    "current_log_context",
    "log_context",
    "log_event",
    "mask_secrets",
]

LogFormat = Literal["text", "json"]
LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]

QUIET_LIBRARIES: Final = (
    "httpx",  # a line per request: every model call
    "httpcore",
    "slack_sdk",  # retry notices, Socket Mode connection chatter
    "slack_bolt",
    "aiohttp.access",  # a line per Slack delivery in HTTP mode
    "mcp",
    "asyncio",
)
"""Libraries kept at WARNING unless the level is DEBUG."""

EVENTS_LOGGER: Final = "opsgate.events"


class _OurHandler(logging.StreamHandler[TextIO]):
    """Marks the handler `configure_logging` installed, so a second call replaces it."""


class _StderrHandler(_OurHandler):
    """Writes to whatever `sys.stderr` is when a line is logged, not when logging was set up
    (a test runner swaps it per test; a closed old one must not swallow lines)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def configure_logging(
    format: str = "text",
    level: str | int = "INFO",
    *,
    stream: TextIO | None = None,
    secrets: Iterable[str] = (),
) -> logging.Handler:
    """Send all logging to `stream` (stderr) in `format`, at `level`; returns the handler.

    `secrets` are values to mask wherever they appear (e.g. the signing secret, which has no
    recognisable prefix); `xoxb-`, `xapp-` and `sk-` tokens are masked anyway. Handlers others
    added to the root logger (pytest's capture) are left alone.
    """
    fmt = _format(format)
    numeric = _level(level)
    secrets = tuple(secrets)
    handler = _OurHandler(stream) if stream is not None else _StderrHandler(sys.stderr)
    handler.addFilter(ContextFilter())
    handler.addFilter(SecretFilter(secrets))
    handler.setFormatter(JsonFormatter(secrets) if fmt == "json" else TextFormatter(secrets))
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _OurHandler)]:
        root.removeHandler(old)
        old.close()
    root.addHandler(handler)
    root.setLevel(numeric)
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(
            logging.NOTSET if numeric <= logging.DEBUG else max(numeric, logging.WARNING)
        )
    return handler


def _format(value: str) -> LogFormat:
    match value.strip().lower():
        case "text":
            return "text"
        case "json":
            return "json"
    raise LogSettingError(f"log format {value!r} is not one of: text, json")


def _level(value: str | int) -> int:
    if isinstance(value, int):
        return value
    upper = value.strip().upper()
    if upper not in get_args(LogLevel):
        raise LogSettingError(f"log level {value!r} is not one of: DEBUG, INFO, WARNING, ERROR")
    return logging.getLevelNamesMapping()[upper]


@contextlib.contextmanager
def log_context(
    *, session: str | None = None, thread: str | None = None, call: str | None = None
) -> Iterator[None]:
    """Within this block (and tasks started in it) log lines carry these ids; ids left None
    keep the value of an enclosing block."""
    given = {"session": session, "thread": thread, "call": call}
    tokens = [(context_vars[k], context_vars[k].set(v)) for k, v in given.items() if v is not None]
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def current_log_context() -> dict[str, str]:
    """The ids `log_context` has set here, e.g. to pass to a thread or subprocess."""
    return {key: value for key, var in context_vars.items() if (value := var.get()) is not None}


def log_event(
    name: str, /, *, level: int = logging.INFO, logger: str = EVENTS_LOGGER, **fields: Any
) -> None:
    """Log `name` (e.g. "run.finished") as an event: one line, with the fields as JSON keys in
    the JSON format and as `key=value` in the text one. `session`, `thread` and `call` given
    here override the context's."""
    parts = [name, *(f"{key}={_show(value)}" for key, value in fields.items())]
    logging.getLogger(logger).log(
        level, " ".join(parts), extra={EVENT_ATTR: name, FIELDS_ATTR: fields}
    )


def _show(value: Any) -> str:
    text = str(value)
    if text and not any(c.isspace() or c in "\"'=" for c in text):
        return text
    return repr(text)
