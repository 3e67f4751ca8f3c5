"""Whether a word the shell rewrites before it runs could be a rule's fixed word.

A file-name pattern (`/usr/bin/r[m]`, `n[s]`) becomes the names of matching files, so what runs
is not in the text; an ANSI-C quoted word (`$'rm'`, `$'\\x72m'`) is a fixed word written
otherwise. A rule must not be dodged by either: a rule that asks or forbids applies to a pattern
that could stand for its word (`fnmatch`), and to a quoted word that decodes to it. A free rule
is never matched by a pattern: the files present decide what it becomes.
"""

from __future__ import annotations

import os
import re
from fnmatch import fnmatchcase

__all__ = ["ansi_c", "word_fits"]

_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}
_NUMERIC = re.compile(r"[0-7]{1,3}|x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{1,4}|U[0-9A-Fa-f]{1,8}")
_LITERAL = re.compile(r"[^$`\"'\\*?\[]")


def ansi_c(word: str) -> str | None:
    """`word` with its `$'...'` parts decoded as bash does, when it holds one and nothing
    else that expands; None otherwise (no such part, or another expansion beside it)."""
    if "$'" not in word:
        return None
    out: list[str] = []
    index = 0
    while index < len(word):
        if word.startswith("$'", index):
            decoded, index = _quoted(word, index + 2)
            if decoded is None:
                return None
            out.append(decoded)
        elif _LITERAL.match(word, index):
            out.append(word[index])
            index += 1
        else:
            return None
    return "".join(out)


def _quoted(word: str, index: int) -> tuple[str | None, int]:
    """The text of a `$'...'` part whose body starts at `index`, and where it ends."""
    out: list[str] = []
    while index < len(word):
        char = word[index]
        if char == "'":
            return "".join(out), index + 1
        if char != "\\" or index + 1 == len(word):
            out.append(char)
            index += 1
            continue
        escape = word[index + 1]
        numeric = _NUMERIC.match(word, index + 1)
        if escape in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[escape])
            index += 2
        elif numeric is not None:
            digits = numeric.group()
            base, text = (8, digits) if digits[0].isdigit() else (16, digits[1:])
            out.append(chr(min(int(text, base), 0x10FFFF)))
            index = numeric.end()
        else:
            out.append("\\" + escape)  # bash keeps an unknown escape as written
            index += 2
    return None, index


def word_fits(word: str, expected: str, *, pattern: bool, loose: bool, program: bool) -> bool:
    """Whether `word` (as written; `pattern`: a file-name pattern there) could be `expected`,
    a rule's word; `loose`: the rule asks or forbids, so a pattern that could be it counts;
    `program`: the command's first word, which matches by its base name too."""
    decoded = ansi_c(word)
    if decoded is not None:
        word = decoded
    elif pattern and loose:
        return fnmatchcase(expected, word) or (
            program and "/" in word and fnmatchcase(expected, os.path.basename(word))
        )
    if word == expected:
        return True
    return program and "/" in word and os.path.basename(word) == expected
