"""The store's last line against lone surrogates: a turn holding one is saved, not lost.

A lone surrogate (from a JSON `\\ud800` escape) cannot be encoded as UTF-8; agent_core cleans
text where it enters, and the store replaces whatever still gets through by U+FFFD.
"""

from __future__ import annotations

from agent_core import ChatMessage, ToolCall
from bot.store import Store

from .conftest import StoreFactory


async def test_messages_with_lone_surrogates_are_saved_with_replacement_characters(
    store: Store,
) -> None:
    session = await store.get_or_create_session("T1", "C1", "1.0")
    call = ToolCall(id="call_1", name="echo", arguments='{"text": "a\ud800b"}')
    await store.append_messages(
        session.id,
        [
            ChatMessage.user("hi \udfff there"),
            ChatMessage.assistant("answer \ud800", tool_calls=(call,)),
            ChatMessage.tool("out \udc80put", "call_1"),
        ],
    )
    user, assistant, tool = await store.load_messages(session.id)
    assert user.content == "hi \ufffd there"
    assert assistant.content == "answer \ufffd"
    assert assistant.tool_calls[0].arguments == '{"text": "a\ufffdb"}'
    assert tool.content == "out \ufffdput"


async def test_audit_details_and_inbox_payloads_with_lone_surrogates_are_saved(
    new_store: StoreFactory,
) -> None:
    async with new_store() as store:
        await store.audit("refusal", actor="U1", details={"text": "x\ud800y"})
        (row,) = [r for r in await store.audit_rows() if r.event == "refusal"]
        assert row.details == {"text": "x\ufffdy"}
        saved = await store.inbox_add("message", {"text": "hi \ud800"})
        assert saved is not None
    async with new_store() as later:
        (item,) = await later.inbox_recover()
        assert item.payload == {"text": "hi \ufffd"}
