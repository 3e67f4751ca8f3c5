"""The text the store writes, made safe for UTF-8: the last line against lone surrogates.

Text from outside is cleaned where it enters (`agent_core.unicode`); this catches whatever a tool,
a client or a future code path still lets through, so a turn is saved with U+FFFD in place of a
lone surrogate instead of failing the write (and the run) on the database's UTF-8 encode.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic_core import PydanticSerializationError

from agent_core import ChatMessage, replace_lone_surrogates, replace_lone_surrogates_in

__all__ = ["json_text", "message_body"]

logger = logging.getLogger("opsgate.store")


def message_body(message: ChatMessage) -> str:
    """The message's stored JSON; lone surrogates anywhere in it become U+FFFD."""
    try:
        return replace_lone_surrogates(message.to_json())
    except PydanticSerializationError:
        logger.warning("a %s message held lone surrogates; replaced by U+FFFD", message.role)
        raw = message.model_dump(mode="python", exclude_defaults=True)
        return ChatMessage.model_validate(replace_lone_surrogates_in(raw)).to_json()


def json_text(value: Any) -> str:
    """`value` as JSON text with UTF-8 kept and lone surrogates replaced."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return replace_lone_surrogates(text)
