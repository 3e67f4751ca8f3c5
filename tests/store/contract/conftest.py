"""One `store` fixture per backend: every test in this package runs against each of them.

Adding a backend is one line in `BACKENDS` plus a factory: given the test's request, return a
function that opens a new (not yet entered) store on that test's own, empty database. Calling it
twice gives two stores on the same database, as two processes or replicas would have.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from bot.store import SQLiteStore, Store
from tests.support.postgres import postgres_cluster, postgres_url

from .helpers import Clock, mention

__all__ = ["postgres_cluster", "postgres_url"]  # fixtures the postgresql backend uses

StoreFactory = Callable[..., Store]


def sqlite_backend(request: pytest.FixtureRequest) -> StoreFactory:
    db: Path = request.getfixturevalue("tmp_path") / "opsgate.db"
    return lambda **kw: SQLiteStore(db, **kw)


def postgresql_backend(request: pytest.FixtureRequest) -> StoreFactory:
    from bot.store import PostgresStore

    url: str = request.getfixturevalue("postgres_url")
    return lambda **kw: PostgresStore(url, **kw)


BACKENDS: dict[str, Callable[[pytest.FixtureRequest], StoreFactory]] = {
    "postgresql": postgresql_backend,
    "sqlite": sqlite_backend,
}


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=sorted(BACKENDS))
def new_store(request: pytest.FixtureRequest, clock: Clock) -> StoreFactory:
    """Opens stores on this test's database; the test's clock unless told otherwise."""
    make = BACKENDS[request.param](request)

    def opened(**kw: Any) -> Store:
        kw.setdefault("clock", clock)
        return make(**kw)

    return opened


@pytest.fixture
async def store(new_store: StoreFactory) -> AsyncIterator[Store]:
    """A store configured as the bot configures it: people named by their Slack mention."""
    async with new_store(person=mention) as opened:
        yield opened
