"""`ChatMessage` / `ToolCall`: lossless JSON, the wire form, argument parsing, call digests."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from agent_core import ChatMessage, ToolCall, call_digest, canonical_arguments

CALLS = (
    ToolCall(id="call_1", name="run_command", arguments='{"command": "df -h", "host": "db-1"}'),
    ToolCall(id="call_2", name="status", arguments=""),
    ToolCall(id="call_3", name="note", arguments='{"text": "naïve ☃ 日本語 🚀"}'),
)

MESSAGES = [
    ChatMessage.system("You are OpsGate."),
    ChatMessage.user("disk usage on db-1? 🙏", name="U123"),
    ChatMessage.assistant(None, CALLS),
    ChatMessage.assistant("Let me check — 確認します.", CALLS[:1]),
    ChatMessage.assistant(""),
    ChatMessage.assistant(None),
    ChatMessage.tool("Filesystem  Size\n/dev/sda1   100G ✓", "call_1"),
    ChatMessage.tool("", "call_2"),
    ChatMessage.tool('{"nested": "json \\" quote"}', "call_3"),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: f"{m.role}-{m.content!r:.20}")
def test_json_round_trip_is_lossless(message: ChatMessage) -> None:
    text = message.to_json()
    again = ChatMessage.from_json(text)

    assert again == message
    assert again.content == message.content  # None stays None, "" stays ""
    assert again.tool_calls == message.tool_calls
    assert again.tool_call_id == message.tool_call_id
    assert again.name == message.name
    assert ChatMessage.from_json(text.encode()) == message


def test_json_keeps_unicode_as_text_and_omits_defaults() -> None:
    text = ChatMessage.user("日本語 🚀").to_json()

    assert "日本語 🚀" in text
    assert json.loads(text) == {"role": "user", "content": "日本語 🚀"}


def test_none_and_empty_content_are_told_apart() -> None:
    assert ChatMessage.from_json(ChatMessage.assistant(None).to_json()).content is None
    assert ChatMessage.from_json(ChatMessage.assistant("").to_json()).content == ""


def test_a_whole_history_round_trips() -> None:
    lines = [m.to_json() for m in MESSAGES]
    assert [ChatMessage.from_json(line) for line in lines] == MESSAGES


def test_messages_are_immutable() -> None:
    message = ChatMessage.user("hi")
    with pytest.raises(ValidationError):
        message.content = "changed"


def test_wire_form_of_an_assistant_tool_call_message() -> None:
    assert ChatMessage.assistant(None, CALLS[:1]).to_wire() == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {
                    "name": "run_command",
                    "arguments": '{"command": "df -h", "host": "db-1"}',
                },
            }
        ],
    }


def test_wire_form_of_tool_user_and_plain_assistant_messages() -> None:
    assert ChatMessage.tool("ok", "call_1").to_wire() == {
        "role": "tool",
        "content": "ok",
        "tool_call_id": "call_1",
    }
    assert ChatMessage.user("hi", name="U1").to_wire() == {
        "role": "user",
        "content": "hi",
        "name": "U1",
    }
    assert ChatMessage.assistant(None).to_wire() == {"role": "assistant", "content": ""}


def test_parsed_arguments() -> None:
    assert CALLS[0].parsed_arguments() == {"command": "df -h", "host": "db-1"}
    assert CALLS[1].parsed_arguments() == {}  # no arguments at all
    assert ToolCall(id="c", name="x", arguments="  ").parsed_arguments() == {}


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ('{"command": "ls"', "arguments of 'run_command' are not valid JSON"),
        ('["ls"]', "arguments of 'run_command' must be a JSON object"),
        ('"ls"', "arguments of 'run_command' must be a JSON object"),
    ],
)
def test_bad_arguments_raise_a_readable_value_error(arguments: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ToolCall(id="c", name="run_command", arguments=arguments).parsed_arguments()


def test_canonical_arguments_do_not_depend_on_key_order_or_spacing() -> None:
    a = json.loads('{"b": 1, "a": {"y": [1, 2], "x": "ü"}}')
    b = json.loads('{"a":{"x":"ü","y":[1,2]},"b":1}')

    assert canonical_arguments(a) == canonical_arguments(b) == '{"a":{"x":"ü","y":[1,2]},"b":1}'


def test_call_digest_is_short_stable_and_binds_name_and_arguments() -> None:
    digest = call_digest("run_command", {"command": "df -h", "host": "db-1"})

    assert len(digest) == 12 and all(ch in "0123456789abcdef" for ch in digest)
    assert digest == call_digest("run_command", {"host": "db-1", "command": "df -h"})
    assert digest != call_digest("run_command", {"command": "rm -rf /", "host": "db-1"})
    assert digest != call_digest("run_other", {"command": "df -h", "host": "db-1"})
