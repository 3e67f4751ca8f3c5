"""A rule's `preview`: a read-only command template built from the parsed command it decides.

The person approving `kubectl apply -f x.yaml` should see what it will do, so a rule may say
`preview = "kubectl diff -f {arg:-f}"`. The template is split into words once, when the file is
read (an unknown placeholder stops start-up, naming the rule); each call's preview is then an
argv built word by word from the simple command the rule matched, never a shell string: a
value with spaces or `;` stays one word of the argv.

Placeholders (pinned by issue 23):

- `{command}` — the simple command's words (wrappers peeled); alone in a template word it
  becomes that many argv words, inside a longer word their shell-quoted text.
- `{operands}` — its words after the rule's prefix that are not options (not starting with
  `-`; every word after `--`); alone in a word, one argv word each.
- `{arg:<option>}` — the value given to that option: `-f x`, `-f=x` (or `--file x`,
  `--file=x` for `{arg:--file}`); `{arg:-f|--filename}` takes whichever is given first.

A placeholder with no value (no operands, an option not given) makes no argv: the preview
fails with a message saying which, and the card shows "preview failed".
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from agent_core import canonical_arguments
from bot.preview_args import fill_preview_args

from ._shell import SimpleCommand

__all__ = ["DEFAULT_PREVIEW_TTL", "PreviewPlan", "PreviewTemplate", "tool_preview"]

DEFAULT_PREVIEW_TTL = timedelta(minutes=10)
"""How old a preview may be when the last needed approval arrives before it is run again."""

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_OPTION = re.compile(r"^--?[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True, slots=True)
class PreviewPlan:
    """The preview of one call: the argv to run, or why there is none (`missing`)."""

    template: str
    argv: tuple[str, ...] | None
    missing: str | None
    """Set when a placeholder had no value ("no value for {arg:-f}"): nothing is run."""
    ttl: timedelta
    tool: str | None = None
    """A custom or MCP tool's preview: the paired read-only tool called (not a command)."""
    arguments: str | None = None
    """Its arguments, canonical JSON (None when a placeholder had no value)."""

    def shown(self) -> str:
        """What ran, in a few words (the card's and `policy explain`'s)."""
        if self.tool is not None:
            return f"{self.tool} {self.arguments or '{}'}"
        return shlex.join(self.argv or ())


@dataclass(frozen=True, slots=True)
class PreviewTemplate:
    """A checked template: its words, each a list of literal text and placeholders."""

    text: str
    words: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> PreviewTemplate:
        """Split and check `text`; `ValueError` naming the first problem."""
        try:
            words = tuple(shlex.split(text))
        except ValueError as exc:
            raise ValueError(f"preview {text!r} is not a command line: {exc}") from None
        if not words:
            raise ValueError("preview is empty; remove the key or write a command")
        for word in words:
            for name in _PLACEHOLDER.findall(word):
                _check_placeholder(name, text)
            if "{" in _PLACEHOLDER.sub("", word) or "}" in _PLACEHOLDER.sub("", word):
                raise ValueError(f"preview {text!r}: unbalanced braces in {word!r}")
        return cls(text, words)

    def expand(
        self, part: SimpleCommand, prefix: tuple[str, ...], ttl: timedelta | None
    ) -> PreviewPlan:
        """The plan for the simple command `part` that a rule with `prefix` matched."""
        argv: list[str] = []
        for word in self.words:
            found = _PLACEHOLDER.fullmatch(word)
            if found is not None:
                values = _values(found.group(1), part.argv, len(prefix))
                if values is None:
                    return self._missing(found.group(1), ttl)
                argv += values
                continue
            text, missing = _fill(word, part.argv, len(prefix))
            if missing is not None:
                return self._missing(missing, ttl)
            argv.append(text)
        return PreviewPlan(self.text, tuple(argv), None, ttl or DEFAULT_PREVIEW_TTL)

    def _missing(self, name: str, ttl: timedelta | None) -> PreviewPlan:
        why = f"no value for {{{name}}} in this command"
        return PreviewPlan(self.text, None, why, ttl or DEFAULT_PREVIEW_TTL)


def tool_preview(
    tool: str,
    template: Mapping[str, Any],
    arguments: Mapping[str, Any],
    defaults: Mapping[str, Any],
    ttl: timedelta | None,
) -> PreviewPlan:
    """The preview of a custom or MCP tool's call: `tool` (read-only, named in the policy)
    called with `preview_args` filled from the call's arguments (`bot.preview_args`)."""
    text = f"{tool} {json.dumps(dict(template), ensure_ascii=False, sort_keys=True)}"
    filled, missing = fill_preview_args(template, arguments, defaults)
    return PreviewPlan(
        template=text,
        argv=None,
        missing=missing,
        ttl=ttl or DEFAULT_PREVIEW_TTL,
        tool=tool,
        arguments=None if filled is None else canonical_arguments(filled),
    )


def _check_placeholder(name: str, text: str) -> None:
    if name in ("command", "operands"):
        return
    if name.startswith("arg:"):
        options = name.removeprefix("arg:").split("|")
        bad = [o for o in options if not _OPTION.match(o)]
        if not bad:
            return
        raise ValueError(
            f"preview {text!r}: {{{name}}} names {bad[0]!r}, which is not an option "
            "(write it as -f or --file)"
        )
    raise ValueError(
        f"preview {text!r}: unknown placeholder {{{name}}} "
        "(use {command}, {operands} or {arg:<option>})"
    )


def _values(name: str, argv: tuple[str, ...], skip: int) -> list[str] | None:
    """The argv words a placeholder stands for; None when it has no value here."""
    if name == "command":
        return list(argv) if argv else None
    if name == "operands":
        found = operands(argv[skip:])
        return found or None
    for option in name.removeprefix("arg:").split("|"):
        value = option_value(argv[skip:], option)
        if value is not None:
            return [value]
    return None


def _fill(word: str, argv: tuple[str, ...], skip: int) -> tuple[str, str | None]:
    """A word with placeholders inside it (`--file={arg:-f}`): their text joined in."""
    missing: list[str] = []

    def one(found: re.Match[str]) -> str:
        values = _values(found.group(1), argv, skip)
        if values is None:
            missing.append(found.group(1))
            return ""
        return values[0] if len(values) == 1 else shlex.join(values)

    text = _PLACEHOLDER.sub(one, word)
    return text, (missing[0] if missing else None)


def operands(words: tuple[str, ...]) -> list[str]:
    """The words that are not options (`-x`, `--long`); every word after `--`."""
    out: list[str] = []
    rest = False
    for word in words:
        if rest:
            out.append(word)
        elif word == "--":
            rest = True
        elif not (word.startswith("-") and word != "-"):
            out.append(word)
    return out


def option_value(words: tuple[str, ...], option: str) -> str | None:
    """The value given to `option`: the word after it, or what follows `option=`."""
    for index, word in enumerate(words):
        if word == "--":
            return None
        if word == option:
            return words[index + 1] if index + 1 < len(words) else None
        if word.startswith(option + "="):
            return word[len(option) + 1 :]
    return None
