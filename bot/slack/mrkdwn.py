"""The only way untrusted text (LLM output, tool arguments, tool output) reaches Slack mrkdwn.

Slack turns `<...>` into links and mentions (`<!channel>`, `<@U..>`, `<https://x|label>`), so
`&`, `<` and `>` are escaped and nothing else: other characters are not control characters
in mrkdwn and escaping them would show as literal entities.

What a person reads must be what the text says: every character not known to show as itself
(an allowlist of printable, non-blank-rendering characters: bidi controls, zero-width and tag
characters, C0/C1 controls, fillers such as U+2800 and U+3164 are not on it) is shown as a
visible `⟦U+202E⟧` mark, a run of one as `⟦400 × U+2800⟧` (`reveal`), and cards flag them
(`hidden_characters`); long runs of whitespace that could push a command's tail out of sight
are shown as `⟦N spaces⟧` (`mark_whitespace`). Markdown links
and images in streamed answers are neutralised (`neutralise_links`, `LinkGuard`): the URL is
shown, never hidden behind a label. See `docs/architecture.md`, "What a card shows".
"""

from __future__ import annotations

import dataclasses
import re
import unicodedata
from datetime import UTC, datetime

from agent_core.messages import CallOutcome, render_outcome

__all__ = [
    "LinkGuard",
    "code_span",
    "escape_cut",
    "escape_mrkdwn",
    "hidden_characters",
    "mark_whitespace",
    "message_link",
    "neutralise_links",
    "one_line",
    "outcome_text",
    "person_text",
    "preformatted",
    "requester_text",
    "reveal",
    "slack_date",
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
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
"""Controls (C0, C1), format characters (bidi controls, zero-width, tags, soft hyphen),
surrogates, private-use and unassigned code points, line and paragraph separators."""
_BLANK_LETTERS = frozenset({0x115F, 0x1160, 0x17B4, 0x17B5, 0x2800, 0x3164, 0xFFA0})
"""Characters that render blank yet are letters or symbols, not whitespace, to any pattern:
Hangul fillers, Khmer inherent vowels, the blank Braille pattern."""
_SHOWN_AS_IS = "\t\n"


def _hidden_ranges() -> list[tuple[int, int]]:
    """The code points shown as marks: everything outside printable, non-blank-rendering
    characters (an allowlist: a character is shown as is only if it is known to show). Planes
    4 to 13 and the rest of 14 and up are unassigned or private: marked whole, unscanned."""
    found: list[tuple[int, int]] = []

    def add(cp: int, last: int) -> None:
        if found and found[-1][1] == cp - 1:
            found[-1] = (found[-1][0], last)
        else:
            found.append((cp, last))

    for first, last in ((0, 0x3FFFF), (0xE0000, 0xE01FF)):
        if first == 0xE0000:
            add(0x40000, 0xDFFFF)
        for cp in range(first, last + 1):
            char = chr(cp)
            if cp in _BLANK_LETTERS or (
                unicodedata.category(char) in _HIDDEN_CATEGORIES and char not in _SHOWN_AS_IS
            ):
                add(cp, cp)
    add(0xE0200, 0x10FFFF)
    return found


def _char_class(ranges: list[tuple[int, int]]) -> str:
    def one(cp: int) -> str:
        return f"\\U{cp:08x}"

    return "".join(one(a) if a == b else f"{one(a)}-{one(b)}" for a, b in ranges)


_HIDDEN_CLASS = f"[{_char_class(_hidden_ranges())}]"
_INVISIBLE = re.compile(_HIDDEN_CLASS)
"""What `reveal` marks and `hidden_characters` reports (see `_hidden_ranges`): bidi controls,
zero-width and invisible characters, tag characters, C0/C1 controls, blank-rendering fillers
such as U+2800 and U+3164, … — anything not known to show as itself."""
_INVISIBLE_RUN = re.compile(f"({_HIDDEN_CLASS})\\1{{3,}}")
"""Four or more of the same hidden character: one mark with the count, so a run cannot push
what follows out of sight."""
_LONG_BLANK = re.compile(r"[^\S\n]{16,}")
_LONG_BREAKS = re.compile(r"(?:[^\S\n]*\n){5,}")


def reveal(text: str) -> str:
    """Invisible and direction-changing characters as visible marks, e.g. `⟦U+202E⟧`."""
    text = _INVISIBLE_RUN.sub(lambda m: f"⟦{len(m.group())} × U+{ord(m.group(1)):04X}⟧", text)
    return _INVISIBLE.sub(lambda m: _mark(m.group()), text)


def _mark(char: str) -> str:
    return f"⟦U+{ord(char):04X}⟧"


def hidden_characters(text: str) -> tuple[str, ...]:
    """The invisible or direction-changing characters in `text` ("U+202E", ...), sorted."""
    return tuple(sorted({f"U+{ord(c):04X}" for c in _INVISIBLE.findall(text)}))


def mark_whitespace(text: str) -> tuple[str, bool]:
    """`text` with runs of 16 or more blanks shown as `⟦N spaces⟧` and of 5 or more line breaks
    as `⟦N line breaks⟧`; and whether any were. Padding cannot push text out of sight."""
    found = False

    def blanks(match: re.Match[str]) -> str:
        nonlocal found
        found = True
        return f"⟦{len(match.group())} spaces⟧"

    def breaks(match: re.Match[str]) -> str:
        nonlocal found
        found = True
        return f"⟦{match.group().count(chr(10))} line breaks⟧\n"

    return _LONG_BLANK.sub(blanks, _LONG_BREAKS.sub(breaks, text)), found


def _escape_only(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def escape_mrkdwn(text: str) -> str:
    """Escape the three characters Slack requires (`&` first, so entities are not doubled),
    and show invisible characters (`reveal`)."""
    return _escape_only(reveal(text))


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


def person_text(person: str) -> str:
    """Someone the run service named (`person`, e.g. "<@U123>" or "terminal:ann"): a well-formed
    mention stays a mention; anything else is escaped, never markup."""
    if person.startswith("<@") and person.endswith(">") and _USER_ID.fullmatch(person[2:-1]):
        return person
    return escape_mrkdwn(person)


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
    """How many characters `char` takes after revealing, neutralising and escaping."""
    if _INVISIBLE.fullmatch(char):
        return len(_mark(char))
    size = 5 if char == "&" else 4 if char in "<>" else 1
    if char == "`" and previous == "`":
        size += len(_ZWSP)
    return size


def preformatted(text: str, limit: int) -> tuple[str, bool]:
    """Untrusted text as a ``` block of at most `limit` characters, fences and note included.

    Returns the block and whether the text was cut. When cut, the block is followed by
    "… N more characters (attached as a file)": the caller attaches the full text.
    """
    body = _escape_only(_neutralise_fences(reveal(text)))
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
    kept_body = _escape_only(_neutralise_fences(reveal(text[:kept])))
    note = _cut_note(len(text) - kept)
    return f"{_FENCE_OPEN}{kept_body}{_FENCE_CLOSE}{note}", True


def _cut_note(omitted: int) -> str:
    return f"\n:warning: _{_ELLIPSIS} {omitted} more characters not shown (attached as a file)_"


_LINK = re.compile(r"(!?)\[([^\]\n]*)\]\(\s*<?([^)\s>]*)>?(?:\s+[\"'(][^)\n]*)?\s*\)")
_LEFTOVER = re.compile(r"\](?=[(\[:])")
_GUARD_HOLD_MAX = 2000


def neutralise_links(text: str) -> str:
    """Markdown links and images in untrusted text as plain words with the URL shown:
    `[label](url)` becomes `label (url)`, `![alt](url)` becomes `image: alt (url)`; any other
    `](`, `][` or `]:` gets a space, so no link, reference or image survives."""

    def plain(match: re.Match[str]) -> str:
        image, label, url = match.groups()
        label = label.strip()
        if image:
            return f"image: {label} ({url})" if label else f"image ({url})"
        return f"{label} ({url})" if label and label != url else f"({url})"

    return _LEFTOVER.sub("] ", _LINK.sub(plain, text))


class LinkGuard:
    """`neutralise_links` over a stream of chunks: a link split across chunks is held back
    until it is complete (at most about 2,000 characters), so it cannot slip through."""

    def __init__(self) -> None:
        self._held = ""

    def feed(self, chunk: str) -> str:
        """The text that may be shown now (neutralised); the rest waits for more chunks."""
        text = self._held + chunk
        cut = _hold_from(text)
        self._held = text[cut:]
        return neutralise_links(text[:cut])

    def flush(self) -> str:
        """Everything still held, neutralised: the stream ended."""
        text, self._held = self._held, ""
        return neutralise_links(text)


def _hold_from(text: str) -> int:
    """Where the possibly incomplete link at the end of `text` starts (len(text): none)."""
    start = text.rfind("[")
    if start != -1 and len(text) - start <= _GUARD_HOLD_MAX:
        tail = text[start:]
        close = tail.find("]")
        # Unresolved: no `]` yet, `]` at the very end, or `](` with no `)` yet.
        if close == -1 or close == len(tail) - 1 or (tail[close + 1] == "(" and ")" not in tail):
            return start - 1 if start > 0 and text[start - 1] == "!" else start
    if text.endswith(("!", "]")):
        return len(text) - 1
    return len(text)


_PERSON = "\x00person\x00"


def outcome_text(outcome: CallOutcome) -> str:
    """`render_outcome`'s words (the one place they live) as mrkdwn: the reason escaped, the
    person who decided a real mention ("Rejected by <@U1>", not "&lt;@U1&gt;")."""
    field = next((f for f in ("by", "cancelled_by") if getattr(outcome, f, None)), None)
    if field is None:
        return escape_mrkdwn(render_outcome(outcome))
    person = str(getattr(outcome, field))
    stand_in: CallOutcome = dataclasses.replace(outcome, **{field: _PERSON})  # type: ignore[arg-type]
    text = escape_mrkdwn(render_outcome(stand_in))
    return text.replace(escape_mrkdwn(_PERSON), person_text(person))  # NUL is shown as a mark


def slack_date(moment: datetime) -> str:
    """Shown in each reader's time zone; the fallback (UTC) where Slack cannot format it."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    fallback = moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"<!date^{int(moment.timestamp())}^{{date_short_pretty}} at {{time}}|{fallback}>"


def message_link(workspace_url: str, channel: str, ts: str) -> str | None:
    """A message's permalink as Slack builds it (`https://x.slack.com/archives/C1/p1700…`),
    from the workspace's URL (`auth.test`); None without one."""
    if not workspace_url.startswith("https://"):
        return None
    return f"{workspace_url.rstrip('/')}/archives/{channel}/p{ts.replace('.', '')}"
