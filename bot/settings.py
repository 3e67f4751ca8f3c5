"""The bot's configuration, from the environment variables in the README's table (and `.env`).

`OPSGATE_DB` is an SQLite file path or a `postgresql://` URL (`bot.store.open_store` opens the
store it names). The URL carries a password, so like pydantic's `SecretStr` a `DatabaseURL`
gives it only through `get_secret_value()`; `str()` and `repr()` (and so the settings' repr,
logs and error messages) show it redacted.

`load_settings` is the one entry point: it turns any missing or malformed value into a
`SettingsError` whose message is one line naming the variable and where to get it, and it never
repeats a secret's value (pydantic's own errors quote the input, so they are not passed on).

One variable is for crash tests alone and is not in the table: `OPSGATE_FAULT_HOLD`, the fault
point to hold at (`checkpoint`), read at the point itself rather than once at start-up.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, GetCoreSchemaHandler, SecretStr, ValidationError, field_validator
from pydantic_core import core_schema
from pydantic_settings import BaseSettings, SettingsConfigDict

from .errors import SettingsError

__all__ = [
    "HOLD_ENV",
    "SCHEMES",
    "DatabaseURL",
    "Mode",
    "Settings",
    "checkpoint",
    "load_settings",
    "redact_url",
    "url_scheme",
]

SCHEMES = ("postgresql", "postgres")
"""The URL schemes `OPSGATE_DB` accepts (anything without `://` is an SQLite file path)."""


def url_scheme(text: str) -> str | None:
    """The scheme of `text` if it is written as a URL (`scheme://...`), else None."""
    scheme, sep, _ = text.partition("://")
    if not sep or not scheme or not scheme.replace("+", "").isalnum():
        return None
    return scheme.lower()


def redact_url(url: str) -> str:
    """The URL with its password (if any) replaced by `***`, fit for messages and logs."""
    try:
        parts = urlsplit(url)
        password, port = parts.password, parts.port
    except ValueError:  # a port that is not a number: show no more than the scheme
        return f"{url_scheme(url) or 'postgresql'}://***"
    if password is None:
        return url
    netloc = f"{parts.username or ''}:***@{parts.hostname or ''}" + (f":{port}" if port else "")
    return urlunsplit(parts._replace(netloc=netloc))


class DatabaseURL:
    """A PostgreSQL connection URL, validated and kept out of sight."""

    __slots__ = ("_url",)

    def __init__(self, url: str) -> None:
        url = url.strip()
        scheme = url_scheme(url)
        if scheme not in SCHEMES:
            raise ValueError(
                f"is a URL with the scheme {scheme!r}; use a file path (SQLite) or a "
                "postgresql:// URL"
            )
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 -- raises ValueError for a port that is not a number
        except ValueError:
            raise ValueError("is a postgresql:// URL with an invalid host or port") from None
        if not (parts.hostname or "host=" in parts.query):
            raise ValueError("is a postgresql:// URL without a host")
        self._url = url

    def get_secret_value(self) -> str:
        """The whole URL, password included: only for connecting."""
        return self._url

    def __str__(self) -> str:
        return redact_url(self._url)

    def __repr__(self) -> str:
        return f"DatabaseURL({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DatabaseURL) and other._url == self._url

    def __hash__(self) -> int:
        return hash(self._url)

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        """Accepted from a string with a PostgreSQL scheme (or an instance)."""

        def build(value: Any) -> DatabaseURL:
            if isinstance(value, DatabaseURL):
                return value
            if not isinstance(value, str) or url_scheme(value) is None:
                raise ValueError("is not a URL")
            return cls(value)

        return core_schema.no_info_plain_validator_function(
            build, serialization=core_schema.plain_serializer_function_ser_schema(str)
        )


Mode = Literal["socket", "http", "chat", "audit", "workspace"]

_DEFAULT_POLICY = Path("opsgate.toml")

_WHERE = {
    "SLACK_BOT_TOKEN": "copy the Bot User OAuth Token (xoxb-…) from your Slack app's "
    "OAuth & Permissions page into .env",
    "SLACK_APP_TOKEN": "create an app-level token with the connections:write scope under "
    "Basic Information → App-Level Tokens of your Slack app and put it (xapp-…) into .env, "
    "or run `opsgate run --http`",
    "SLACK_SIGNING_SECRET": "copy the Signing Secret from your Slack app's Basic Information "
    "page into .env, or run in Socket Mode (without --http)",
    "SLACK_API_URL": "leave it unset for https://slack.com/api/, or give the full http(s) URL "
    "of the Web API ending in /api/",
    "OPENAI_BASE_URL": "set it to your OpenAI-compatible endpoint, e.g. https://api.openai.com/v1 "
    "or http://localhost:11434/v1",
    "OPSGATE_MODEL": "set it in .env to the model name your OpenAI-compatible endpoint serves "
    "(for example gpt-4o-mini)",
    "OPSGATE_DB": "set it to a file path in an existing directory, or leave it unset for "
    "./opsgate.db (several replicas: postgresql://user:password@host:5432/database)",
    "OPSGATE_POLICY": "set it to the path of your policy TOML file, or leave it unset",
    "OPSGATE_PORT": "set it to a port number between 1 and 65535, or leave it unset for 3000",
    "OPSGATE_CONTEXT_TOKENS": "set it to the model's context window in tokens (at least 1000), "
    "or leave it unset to ask the server (else go by the model's name)",
    "OPSGATE_MAX_REPLY_TOKENS": "set it to the most tokens one model reply may take (at least "
    "16), or leave it unset for an eighth of the context window (at most 4096)",
    "OPSGATE_LOG_FORMAT": "set it to text or json, or leave it unset for text",
    "OPSGATE_LOG_LEVEL": "set it to DEBUG, INFO, WARNING or ERROR, or leave it unset for INFO",
    **{
        name: f"set it to a number of seconds, or leave it unset for {default}"
        for name, default in (
            ("OPSGATE_SHUTDOWN_GRACE", "30"),
            ("OPSGATE_SLACK_TIMEOUT", "30"),
        )
    },
    "OPSGATE_LEASE_SECONDS": "set it to a number of seconds above OPSGATE_HEARTBEAT_SECONDS "
    "(replicas only), or leave it unset for 30",
    "OPSGATE_HEARTBEAT_SECONDS": "set it to a number of seconds below OPSGATE_LEASE_SECONDS "
    "(replicas only), or leave it unset for 10",
}

_TOKEN_KINDS = {
    "xoxb-": "a bot token (SLACK_BOT_TOKEN)",
    "xapp-": "an app-level token (SLACK_APP_TOKEN)",
    "xoxp-": "a user token, which OpsGate does not use",
}


def _default_policy() -> Path | None:
    return _DEFAULT_POLICY if _DEFAULT_POLICY.is_file() else None


class Settings(BaseSettings):
    """All settings, named exactly as the environment variables (lower-cased).

    Secrets are `SecretStr`: repr/str show `**********`; call `.get_secret_value()` at use.
    Build it with `load_settings`, which checks what each mode requires (a bare `Settings()`
    accepts an unset SLACK_BOT_TOKEN or OPSGATE_MODEL as empty).
    """

    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        env_ignore_empty=True,
        extra="ignore",
        frozen=True,
    )

    slack_bot_token: SecretStr = SecretStr("")
    """Empty when unset; `load_settings` requires it for the Slack modes."""
    slack_app_token: SecretStr | None = None
    slack_signing_secret: SecretStr | None = None
    slack_api_url: str = "https://slack.com/api/"
    pagerduty_token: SecretStr | None = None
    """For `[oncall.<name>] pagerduty_schedule`: a PagerDuty REST API token (read-only)."""
    pagerduty_api_url: str = "https://api.pagerduty.com"
    openai_api_key: SecretStr = SecretStr("")
    openai_base_url: str = "https://api.openai.com/v1"
    opsgate_model: str = ""
    """Empty when unset; `load_settings` requires it wherever the agent runs."""
    opsgate_db: Path | DatabaseURL = Path("./opsgate.db")
    """An SQLite file, or a PostgreSQL URL (replicas; its password never shows)."""
    opsgate_policy: Path | None = Field(default_factory=_default_policy)
    opsgate_shadow_policy: Path | None = None
    """A policy judged beside the live one, never acted on (overrides `[shadow] policy`)."""
    opsgate_port: int = Field(default=3000, ge=1, le=65535)
    opsgate_receipt_key: Path | None = None
    """A PEM Ed25519 private key that signs outside approvals' receipts; None: one made once
    and kept in the database (shared by replicas)."""
    opsgate_context_tokens: int | None = Field(default=None, ge=1000)
    """The model's context budget; None: what the server says, else by model name
    (`agent_core.resolve_context_window`)."""
    opsgate_max_reply_tokens: int | None = Field(default=None, ge=16)
    """The reply bound sent with every model request (`max_tokens`); None: from the window."""
    # Bounds, in seconds.
    opsgate_shutdown_grace: float = Field(default=30.0, ge=0)
    """On SIGTERM: how long work in flight may finish before it is cut (and recovered)."""
    opsgate_slack_timeout: float = Field(default=30.0, gt=0)
    """Every Slack Web API call."""
    opsgate_slack_share: float = Field(default=1.0, gt=0, le=1)
    """The share of the workspace's Slack rate limits this bot spends (`bot.slack.pacing`;
    replicas on PostgreSQL share one budget through the database: each may spend all of it)."""
    opsgate_slack_write_deadline: float = Field(default=600.0, gt=0)
    """Seconds a write to Slack keeps waiting out rate limits before it is given up (and its
    thread told)."""
    opsgate_log_format: Literal["text", "json"] = "text"
    opsgate_log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @field_validator("opsgate_log_format", mode="before")
    @classmethod
    def _log_format(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("opsgate_log_level", mode="before")
    @classmethod
    def _log_level(cls, value: object) -> object:
        return value.strip().upper() if isinstance(value, str) else value

    opsgate_turn_timeout: float = Field(default=300.0, gt=0)
    """One model turn, however the provider keeps its stream alive."""
    opsgate_run_timeout: float = Field(default=1800.0, gt=0)
    """One run (or one resume after a decision): past it the run is stopped."""
    opsgate_max_answer_chars: int = Field(default=4_000_000, gt=0)
    """Longest answer one run may stream (characters): past it the stream is stopped, what
    came is kept and the thread is told. Bounds a run's memory, whatever the provider sends."""
    opsgate_lease_seconds: float = Field(default=30.0, gt=0)
    """Replicas (PostgreSQL): how long a replica's lease lasts without a heartbeat; a survivor
    reports a dead replica's running calls at most this long (plus one heartbeat) after."""
    opsgate_heartbeat_seconds: float = Field(default=10.0, gt=0)
    """Replicas: how often the lease is renewed and the recovery pass runs."""

    @field_validator("slack_bot_token")
    @classmethod
    def _bot_token(cls, value: SecretStr) -> SecretStr:
        return value if not value.get_secret_value().strip() else _token(value, "xoxb-")

    @field_validator("slack_app_token")
    @classmethod
    def _app_token(cls, value: SecretStr | None) -> SecretStr | None:
        return None if value is None else _token(value, "xapp-")

    @field_validator("slack_signing_secret")
    @classmethod
    def _signing_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().strip():
            raise ValueError("is empty")
        return value

    @field_validator("slack_api_url")
    @classmethod
    def _slack_api_url(cls, value: str) -> str:
        value = _http_url(value)
        return value if value.endswith("/") else value + "/"  # slack_sdk joins method names

    @field_validator("openai_base_url")
    @classmethod
    def _openai_base_url(cls, value: str) -> str:
        return _http_url(value)

    @field_validator("opsgate_db", mode="before")
    @classmethod
    def _database(cls, value: Any) -> Any:
        return DatabaseURL(value) if isinstance(value, str) and url_scheme(value) else value

    @field_validator("opsgate_model")
    @classmethod
    def _model(cls, value: str) -> str:
        return value.strip()


def load_settings(*, mode: Mode, env_file: str | None = ".env") -> Settings:
    """Read and check the settings `mode` needs.

    "socket" and "http" run the Slack bot; "workspace" the local workspace (no Slack settings,
    a demo model when none is set); "chat" (`opsgate chat`) needs the LLM settings but
    no Slack ones; "audit" needs only the database. `env_file=None` reads the process
    environment only. Raises `SettingsError` naming the first problem (and the other variables
    to check), in the order of the README's table.
    """
    settings, problems = _build(env_file)
    problems += _mode_problems(settings, mode)
    if problems:
        order = list(Settings.model_fields)
        problems.sort(key=lambda problem: order.index(problem[0].lower()))
        first_name, first = problems[0]
        others = sorted({name for name, _ in problems} - {first_name})
        if others:
            first += f" (also check {', '.join(others)})"
        raise SettingsError(first)  # outside `except`: no pydantic error chained to it
    return settings


# -- machinery ---------------------------------------------------------------------------------

Problem = tuple[str, str]
"""(variable name, one-line message)."""


def _build(env_file: str | None) -> tuple[Settings, list[Problem]]:
    """The settings, with every invalid value replaced by its default, and what was invalid."""
    # pydantic's dataclass_transform hides BaseSettings' own `_env_file` keyword from mypy.
    options: dict[str, Any] = {"_env_file": env_file}
    try:
        return Settings(**options), []
    except ValidationError as error:
        details = error.errors(include_input=False)
    problems = [_describe(detail) for detail in details]
    # Build again with defaults for the invalid fields, so the mode checks still see the rest.
    for detail in details:
        name = str(detail["loc"][0])
        options[name] = Settings.model_fields[name].get_default(call_default_factory=True)
    return Settings(**options), problems


def _mode_problems(settings: Settings, mode: Mode) -> list[Problem]:
    problems: list[Problem] = []
    if mode in ("socket", "http") and not settings.slack_bot_token.get_secret_value():
        problems.append(("SLACK_BOT_TOKEN", _missing("SLACK_BOT_TOKEN")))
    if mode == "socket" and settings.slack_app_token is None:
        problems.append(("SLACK_APP_TOKEN", _missing("SLACK_APP_TOKEN", "Socket Mode needs it")))
    if mode == "http" and settings.slack_signing_secret is None:
        why = "HTTP mode needs it"
        problems.append(("SLACK_SIGNING_SECRET", _missing("SLACK_SIGNING_SECRET", why)))
    db = settings.opsgate_db
    if isinstance(db, Path):
        problems += _database_problems(db)
    if mode == "audit":
        return problems
    if settings.opsgate_heartbeat_seconds >= settings.opsgate_lease_seconds:
        name = "OPSGATE_HEARTBEAT_SECONDS"
        problems.append((name, f"{name} is not below OPSGATE_LEASE_SECONDS: " + _WHERE[name]))
    if not settings.opsgate_model and mode != "workspace":  # the workspace has a demo model
        problems.append(("OPSGATE_MODEL", _missing("OPSGATE_MODEL")))
    directory = db.parent if isinstance(db, Path) else None
    if directory is not None and not directory.is_dir():
        problems.append(
            (
                "OPSGATE_DB",
                f"OPSGATE_DB is in a directory that does not exist ({directory}): "
                + _WHERE["OPSGATE_DB"],
            )
        )
    policy = settings.opsgate_policy
    if policy is not None and not policy.is_file():
        problems.append(
            (
                "OPSGATE_POLICY",
                f"OPSGATE_POLICY names a file that does not exist ({policy}): "
                + _WHERE["OPSGATE_POLICY"],
            )
        )
    return problems


_SQLITE_HEADER = b"SQLite format 3\x00"


def _database_problems(path: Path) -> list[Problem]:
    """A directory or a file that is not SQLite as OPSGATE_DB: said here, in one line, rather
    than as the database driver's error from deep inside start-up.

    An empty file is a valid new database; an unreadable one is left to the store to report.
    """
    if path.is_dir():
        return [("OPSGATE_DB", f"OPSGATE_DB is a directory ({path}): " + _WHERE["OPSGATE_DB"])]
    if not path.is_file():  # missing (created at start-up), or a device: not ours to judge
        return []
    try:
        with path.open("rb") as file:
            header = file.read(len(_SQLITE_HEADER))
    except OSError:
        return []
    if header and header != _SQLITE_HEADER:
        return [
            (
                "OPSGATE_DB",
                f"OPSGATE_DB is not an SQLite database ({path}): name OpsGate's database file, "
                "or a new file in an existing directory",
            )
        ]
    return []


def _describe(detail: Any) -> tuple[str, str]:
    """(variable name, message) for one pydantic error, without the offending input."""
    location = detail.get("loc") or ("settings",)
    name = str(location[0]).upper()
    context = detail.get("ctx") or {}
    reason = str(context.get("error", "")) or _generic(detail.get("type", ""))
    return name, f"{name} {reason}: {_WHERE.get(name, 'check its value')}"


def _missing(name: str, why: str | None = None) -> str:
    because = f" ({why})" if why else ""
    return f"{name} is missing{because}: {_WHERE.get(name, 'set it in .env')}"


def _generic(error_type: str) -> str:
    if error_type == "literal_error":
        return "is not one of the allowed values"
    if error_type.startswith("float") or error_type == "greater_than":
        return "is not a positive number"
    if error_type.startswith("int") or error_type.startswith("greater") or "less" in error_type:
        return "is not a valid port number"
    return "is not valid"


def _token(value: SecretStr, prefix: str) -> SecretStr:
    secret = value.get_secret_value().strip()
    if not secret.startswith(prefix):
        kind = next((k for p, k in _TOKEN_KINDS.items() if secret.startswith(p)), None)
        looks = f", but this looks like {kind}" if kind else ""
        raise ValueError(f"must start with {prefix}{looks}")
    return SecretStr(secret)


def _http_url(value: str) -> str:
    value = value.strip()
    if not value.startswith(("http://", "https://")) or len(value) <= len("https://"):
        raise ValueError("must be an http:// or https:// URL")
    return value


# -- fault points -----------------------------------------------------------------------------
# Fault points for crash tests: `OPSGATE_FAULT_HOLD=<point>` makes the process say so on stderr
# and then hold at that point, so a test can kill -9 it exactly there.
#
# Points: `inbox` (a saved delivery, before it is processed), `resume_claimed` (after the resume
# claim), `resume_started` (after `resume_started`, before the first call is marked executing),
# `allow_decided` (in `Store.allow_call`'s transaction: the call approved, its allowance not yet
# written), `shortcut` (the message shortcut acknowledged, its run not yet queued),
# `redraw_claimed` (the outbox's sender took a card's owed redraw, not yet drawn or sent),
# `plane_card` (an outside request answered 201, its card not yet posted), `plane_opening`
# (an outside request's thread posted, its batch not yet recorded).
# Unset, a point costs one environment lookup.


HOLD_ENV = "OPSGATE_FAULT_HOLD"


async def checkpoint(point: str) -> None:
    if os.environ.get(HOLD_ENV) != point:
        return
    print(f"opsgate-fault: holding at {point}", file=sys.stderr, flush=True)
    await asyncio.Event().wait()
