"""The `OPSGATE_DB` setting: an SQLite file path or a `postgresql://` URL (`bot.store.open_store`
opens the store it names).

The URL carries a password, so like pydantic's `SecretStr` a `DatabaseURL` gives it only through
`get_secret_value()`; `str()` and `repr()` (and so the settings' repr, logs and error messages)
show it redacted.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

__all__ = ["SCHEMES", "DatabaseURL", "redact_url", "url_scheme"]

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
