"""Logging set-up: text or one JSON object per line on stderr, the run's ids on every line.

`configure_logging` is called once at start-up (`OPSGATE_LOG_FORMAT`, `OPSGATE_LOG_LEVEL`:
`log_from_settings`, as each command does once it has read them, with `-v` forcing DEBUG and
the settings' secrets masked);
`log_context` marks the run being worked on, so every line logged inside it, by any module,
carries its session, thread and call ids; `log_event` logs a run, decision or tool execution as
an event with fields a log pipeline can query. Secrets are masked on every line (`mask_secrets`).

A text line is one record: control characters in any of its fields (a provider's error, a
Slack id, an exception's message) are escaped, so text from outside cannot start a line of its
own that reads like ours (`… decision=approved by=U0BOSS`). JSON lines are escaped by JSON.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import sys
import traceback
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, Literal, TextIO, get_args

from agent_core.tools import current_call_id
from bot.errors import LogSettingError

if TYPE_CHECKING:
    from bot.settings import Settings

__all__ = [
    "EVENTS_LOGGER",
    "QUIET_LIBRARIES",
    "LogFormat",
    "LogLevel",
    "configure_logging",
    "current_log_context",
    "log_context",
    "log_event",
    "log_from_settings",
    "mask_secrets",
]

CONTEXT_KEYS: Final = ("session", "thread", "call")

context_vars: Final[Mapping[str, ContextVar[str | None]]] = {
    key: ContextVar(f"opsgate_log_{key}", default=None) for key in CONTEXT_KEYS
}
"""The ids of the run being worked on; each asyncio task sees its own copy."""

# Slack tokens by their prefix (any length); OpenAI-style keys only when long enough that
# "sk-learn" and the like survive.
_TOKEN = re.compile(
    r"(?<![A-Za-z0-9_])(?:(?P<slack>xox[a-z]-|xapp-)[A-Za-z0-9_\-]+|(?P<key>sk-)[A-Za-z0-9_\-]{8,})"
)
# The password in a URL such as postgresql://user:pass@host/db.
_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.\-]*://[^:/@\s]+:)[^@\s/]+@")
_MASK = "***"
_MIN_SECRET = 8

# Attributes this package puts on a `LogRecord`.
EVENT_ATTR: Final = "opsgate_event"
FIELDS_ATTR: Final = "opsgate_fields"
_CONTEXT_ATTR: Final = "opsgate_context"

_CORE_KEYS: Final = frozenset({"ts", "level", "logger", "message", "event", "exc", "stack"})

# C0 and C1 controls with DEL, the Unicode line and paragraph separators, and the bidirectional
# marks, embeddings, overrides and isolates (which reorder how a line reads).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")
_SHORT_ESCAPES: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(match: re.Match[str]) -> str:
    char = match[0]
    short = _SHORT_ESCAPES.get(char)
    if short is not None:
        return short
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str) -> str:
    """`text` with every control character written as an escape (`\\n`, `\\x1b`, `\\u202e`),
    so it stays on one line and reads in its own order."""
    return _CONTROL.sub(_escaped, text)


def mask_secrets(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with token-looking strings, URL passwords and the given secret values replaced
    by `***`."""
    text = _TOKEN.sub(lambda m: (m["slack"] or m["key"]) + _MASK, text)
    text = _URL_PASSWORD.sub(lambda m: m["head"] + _MASK + "@", text)
    for secret in secrets:
        if len(secret) >= _MIN_SECRET:
            text = text.replace(secret, _MASK)
    return text


class SecretFilter(logging.Filter):
    """Masks tokens in a record's message and traceback before any handler sees them.

    Secrets are matched by shape (`xoxb-`, `xapp-`, `sk-`) and, for those without one (the
    signing secret), by value.
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = tuple(s for s in secrets if len(s) >= _MIN_SECRET)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: the handler reports it, not the caller
            return True
        record.msg, record.args = mask_secrets(message, self.secrets), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask_secrets(record.exc_text, self.secrets)
        if record.stack_info:
            record.stack_info = mask_secrets(record.stack_info, self.secrets)
        return True


class ContextFilter(logging.Filter):
    """Copies the current run ids onto the record, at the moment it is logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, _CONTEXT_ATTR):
            ids = {key: var.get() for key, var in context_vars.items()}
            if ids.get("call") is None:  # inside a tool: agent_core knows which call runs
                ids["call"] = current_call_id.get()
            setattr(record, _CONTEXT_ATTR, {k: v for k, v in ids.items() if v is not None})
        return True


def _ids(record: logging.LogRecord) -> dict[str, Any]:
    """The run ids of a record: the context's, overridden by ids given to `log_event`."""
    ids: dict[str, Any] = dict(getattr(record, _CONTEXT_ATTR, {}))
    fields: Mapping[str, Any] = getattr(record, FIELDS_ATTR, {})
    ids.update({key: fields[key] for key in CONTEXT_KEYS if fields.get(key) is not None})
    return ids


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line: `ts`, `level`, `logger`, `message`, the run ids
    where known, an event's name and fields, and `exc` for an exception."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = tuple(secrets)

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        line.update(_ids(record))
        event = getattr(record, EVENT_ATTR, None)
        if event is not None:
            line["event"] = event
        fields: Mapping[str, Any] = getattr(record, FIELDS_ATTR, {})
        for key, value in fields.items():
            if key not in CONTEXT_KEYS:
                line[f"field_{key}" if key in _CORE_KEYS else key] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exc"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        text = json.dumps(line, ensure_ascii=False, default=str)
        return mask_secrets(text, self.secrets)


class TextFormatter(logging.Formatter):
    """`time LEVEL logger: message [session=… thread=… call=…]`, for people at a terminal.

    Every field is escaped (`escape_controls`); a traceback follows on lines of its own, with
    each exception's message escaped, so only the traceback's own layout breaks lines."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.secrets = tuple(secrets)

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        fields = (self.formatTime(record, self.datefmt), record.levelname, record.name)
        time, level, name = (escape_controls(str(field)) for field in fields)
        text = f"{time} {level} {name}: {escape_controls(record.message)}"
        ids = _ids(record)
        if ids:
            suffix = " ".join(
                f"{key}={escape_controls(str(ids[key]))}" for key in CONTEXT_KEYS if key in ids
            )
            text = f"{text} [{suffix}]"
        if record.exc_info and record.exc_info[1] is not None:
            text = f"{text}\n{_traceback(record.exc_info[1])}"
        elif record.exc_text:  # formatted elsewhere: its lines kept, each one escaped
            text += "".join(f"\n{escape_controls(line)}" for line in record.exc_text.splitlines())
        if record.stack_info:
            text = f"{text}\n{self.formatStack(record.stack_info)}"
        return mask_secrets(text, self.secrets)


def _traceback(exc: BaseException) -> str:
    """Python's traceback of `exc`, with the message (and notes) of every exception in it
    escaped: the longest first, so one that contains another is escaped whole. A member of an
    exception group is drawn with a margin (`    | `) before each of its lines."""
    text = "".join(traceback.format_exception(exc))
    messages = {"".join(traceback.format_exception_only(e)).removesuffix("\n") for e in _chain(exc)}
    for message in sorted(messages, key=len, reverse=True):
        text = _escape_drawn(text, message)
    return text.removesuffix("\n")


def _escape_drawn(text: str, message: str) -> str:
    """`text` with `message`, wherever it is drawn on lines of its own (behind a margin that
    repeats on each line), escaped."""
    lines = "\n(?P=margin)".join(re.escape(line) for line in message.split("\n"))
    shown = escape_controls(message)
    drawn = re.compile(f"^(?P<margin>[ |]*){lines}$", flags=re.MULTILINE)
    return drawn.sub(lambda match: match["margin"] + shown, text)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, its causes and contexts, and the members of exception groups, each once."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo += [e for e in (current.__cause__, current.__context__) if e is not None]
        if isinstance(current, BaseExceptionGroup):
            todo += current.exceptions


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


# -- logging from the settings: each command's, once it has read them --------------------------


def log_from_settings(settings: Settings, *, verbose: bool, floor: str | None = None) -> None:
    """`floor` raises the level for commands whose own output is the point (`chat`): their
    INFO lines would land between a prompt and its answer."""
    level: str = "DEBUG" if verbose else settings.opsgate_log_level
    if floor is not None and not verbose and _rank(level) < _rank(floor):
        level = floor
    secrets = [
        secret.get_secret_value()
        for secret in (
            settings.slack_bot_token,
            settings.slack_app_token,
            settings.slack_signing_secret,
            settings.openai_api_key,
        )
        if secret is not None and secret.get_secret_value()
    ]
    configure_logging(settings.opsgate_log_format, level, secrets=secrets)


def _rank(level: str) -> int:
    return ("DEBUG", "INFO", "WARNING", "ERROR").index(level)
