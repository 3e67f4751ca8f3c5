"""Fixtures shared by the tests that talk to the LLM stand-in over loopback HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.support.llm_server import LLMStandIn


@pytest.fixture
async def llm() -> AsyncIterator[LLMStandIn]:
    async with LLMStandIn() as server:
        yield server
        assert server.unexpected == [], "a request arrived with no reply queued"


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as client:
        yield client


_PROCESS_FIXTURES = {"postgres_cluster", "postgres_url"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark what needs child processes or PostgreSQL, so `pytest -m "not processes"` is fast.

    Everything under `tests/processes/` is marked, and so is every test that uses the private
    PostgreSQL cluster (the store contract runs each test on both backends: the SQLite half
    stays in the fast loop).
    """
    for item in items:
        in_processes = "processes" in item.path.parts
        callspec = getattr(item, "callspec", None)
        on_postgres = callspec is not None and "postgresql" in callspec.params.values()
        uses_cluster = _PROCESS_FIXTURES & set(getattr(item, "fixturenames", ()))
        if in_processes or on_postgres or uses_cluster:
            item.add_marker(pytest.mark.processes)
