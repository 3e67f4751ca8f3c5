"""Pinned MCP tool definitions: first sight pins, a changed digest quarantines, acceptance is
conditional, and two stores (processes, replicas) listing at once pin once."""

from __future__ import annotations

import asyncio

from bot.store import ListedTool, Store

from .conftest import StoreFactory

V1 = ListedTool("lookup", "d1", '{"name":"lookup"}')
V2 = ListedTool("lookup", "d2", '{"name":"lookup","description":"new"}')


async def _events(store: Store) -> list[str]:
    return [r.event for r in await store.audit_rows() if r.event.startswith("mcp_tool")]


async def test_a_changed_definition_is_quarantined_until_accepted(store: Store) -> None:
    [pin] = await store.pin_tools("net", [V1])
    assert (pin.state, pin.digest, pin.listed_digest) == ("pinned", "d1", None)
    assert (await store.pin_tools("net", [V1]))[0].state == "pinned"
    [pin] = await store.pin_tools("net", [V2], changes={"lookup": {"description": {}}})
    assert (pin.state, pin.digest, pin.listed_digest) == ("quarantined", "d1", "d2")
    [pin] = await store.pin_tools("net", [V1])  # flipping back does not lift it
    assert pin.state == "quarantined"
    assert not await store.accept_tool_definition("net", "lookup", "d1", user_id="U0A")
    assert await store.accept_tool_definition("net", "lookup", "d2", user_id="U0A")
    assert not await store.accept_tool_definition("net", "lookup", "d2", user_id="U0B")
    [pin] = await store.mcp_pins()
    assert (pin.state, pin.digest, pin.accepted_by) == ("pinned", "d2", "U0A")
    assert await _events(store) == ["mcp_tool_pinned", "mcp_tool_changed", "mcp_tool_accepted"]


async def test_two_stores_listing_at_once_pin_once(new_store: StoreFactory) -> None:
    async with new_store() as one, new_store() as two:
        await asyncio.gather(one.pin_tools("net", [V1]), two.pin_tools("net", [V1]))
        assert await _events(one) == ["mcp_tool_pinned"]
