"""Lone surrogates: text Python can hold but UTF-8 cannot carry.

A JSON `\\ud800` escape without its partner decodes to a `str` holding U+D800; the first
`.encode()` downstream (the database, the Slack request, the next model request) then raises, far
from where the text came in. Text from outside (a model stream, tool arguments, tool output) is
cleaned where it enters: each lone surrogate becomes U+FFFD, the replacement character, as a
UTF-8 decoder would have done. A proper pair held as two code points is joined, not replaced.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["has_lone_surrogates", "replace_lone_surrogates", "replace_lone_surrogates_in"]

_SURROGATE = re.compile("[\ud800-\udfff]")


def has_lone_surrogates(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def replace_lone_surrogates(text: str) -> str:
    """`text` with every lone surrogate replaced by U+FFFD (the same object if it has none)."""
    if _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def replace_lone_surrogates_in(value: Any) -> Any:
    """A JSON-like value (dicts, lists, tuples) with every string, keys too, cleaned."""
    if isinstance(value, str):
        return replace_lone_surrogates(value)
    if isinstance(value, dict):
        return {
            replace_lone_surrogates_in(k): replace_lone_surrogates_in(v) for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return type(value)(replace_lone_surrogates_in(item) for item in value)
    return value
