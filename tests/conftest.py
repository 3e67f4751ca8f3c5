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
