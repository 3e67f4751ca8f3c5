"""The only way untrusted text (LLM output, tool arguments, tool output) reaches Slack mrkdwn.

Slack turns `<...>` into links and mentions (`<!channel>`, `<@U..>`, `<https://x|label>`), so
`&`, `<` and `>` are escaped and nothing else: other characters are not control characters
in mrkdwn and escaping them would show as literal entities.
"""

from __future__ import annotations

import re

__all__ = [
    "code_span",
    "escape_cut",
    "escape_mrkdwn",
    "one_line",
    "preformatted",
    "requester_text",
    "truncate",
    "user_mention",
]

_ELLIPSIS = "…"
_FENCE_OPEN = "```\n"
_FENCE_CLOSE = "\n```"
_ZWSP = "\u200b"
_BACKTICK_AFTER_BACKTICK = re.compile(r"(?<=`)`")
_USER_ID = re.compile(r"[UW][A-Z0-9]{1,20}")
_BOT_ID = re.compile(r"[BA][A-Z0-9]{1,20}")
_WHITESPACE = re.compile(r"\s+")


def escape_mrkdwn(text: str) -> str:
    """Escape the three characters Slack requires (`&` first, so entities are not doubled)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def truncate(text: str, limit: int) -> str:
    """Cut raw text to at most `limit` characters, marking the cut with `…`.

    Apply it before `escape_mrkdwn`: cutting escaped text could split an entity.
    """
    if limit < 1:
        raise ValueError(f"truncate limit must be at least 1, got {limit!r}")
    if len(text) <= limit:
        return text
    return text[: limit - 1] + _ELLIPSIS


def escape_cut(text: str, limit: int) -> str:
    """`escape_mrkdwn(text)` cut so that the escaped result is at most `limit` characters.

    Block Kit limits count the characters sent, and escaping can grow text fivefold, so
    budgets are kept on the escaped text; the cut never splits an entity.
    """
    if limit < 1:
        raise ValueError(f"escape_cut limit must be at least 1, got {limit!r}")
    escaped = escape_mrkdwn(text)
    if len(escaped) <= limit:
        return escaped
    used = kept = 0
    for char in text:
        size = _cost(char, "")
        if used + size > limit - len(_ELLIPSIS):
            break
        used += size
        kept += 1
    return escape_mrkdwn(text[:kept]) + _ELLIPSIS


def one_line(text: str, limit: int) -> str:
    """Untrusted text as one escaped line of at most `limit` characters (whitespace collapsed)."""
    return escape_cut(_WHITESPACE.sub(" ", text).strip(), limit)


def code_span(text: str, limit: int = 80) -> str:
    """Untrusted text as inline code of at most `limit` characters inside the backticks.

    A backtick would end the span, so backticks become `ˋ`.
    """
    flat = _WHITESPACE.sub(" ", text).strip().replace("`", "ˋ") or " "
    return f"`{escape_cut(flat, limit)}`"


def user_mention(user_id: str) -> str:
    """`<@U..>` for a well-formed user id; anything else is shown escaped, never as markup."""
    if _USER_ID.fullmatch(user_id):
        return f"<@{user_id}>"
    return one_line(user_id, 40)


def requester_text(requester: str) -> str:
    """Who asked for a run: a mention for a person, "integration `B…`" for an allow-listed bot
    (a bot id cannot be mentioned), and anything else escaped."""
    if _BOT_ID.fullmatch(requester):
        return f"integration `{requester}`"
    return user_mention(requester)


def _neutralise_fences(text: str) -> str:
    # A zero-width space after every backtick that follows a backtick: no run of three
    # backticks survives, so the text cannot close (or reopen) the code block around it.
    return _BACKTICK_AFTER_BACKTICK.sub(_ZWSP + "`", text)


def _cost(char: str, previous: str) -> int:
    """How many characters `char` takes after neutralising and escaping."""
    size = 5 if char == "&" else 4 if char in "<>" else 1
    if char == "`" and previous == "`":
        size += len(_ZWSP)
    return size


def preformatted(text: str, limit: int) -> tuple[str, bool]:
    """Untrusted text as a ``` block of at most `limit` characters, fences and note included.

    Returns the block and whether the text was cut. When cut, the block is followed by
    "… N more characters (attached as a file)": the caller attaches the full text.
    """
    body = escape_mrkdwn(_neutralise_fences(text))
    overhead = len(_FENCE_OPEN) + len(_FENCE_CLOSE)
    if len(body) + overhead <= limit:
        return f"{_FENCE_OPEN}{body}{_FENCE_CLOSE}", False
    longest_note = _cut_note(len(text))
    budget = limit - overhead - len(longest_note)
    if budget < 1:
        raise ValueError(f"preformatted limit {limit!r} leaves no room for text")
    used = kept = 0
    previous = ""
    for char in text:
        size = _cost(char, previous)
        if used + size > budget:
            break
        used += size
        kept += 1
        previous = char
    kept_body = escape_mrkdwn(_neutralise_fences(text[:kept]))
    note = _cut_note(len(text) - kept)
    return f"{_FENCE_OPEN}{kept_body}{_FENCE_CLOSE}{note}", True


def _cut_note(omitted: int) -> str:
    return f"\n_{_ELLIPSIS} {omitted} more characters (attached as a file)_"
