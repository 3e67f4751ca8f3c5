"""A rule's `preview`: a read-only command template built from the parsed command it decides.

The person approving `kubectl apply -f x.yaml` should see what it will do, so a rule may say
`preview = "kubectl diff -f {arg:-f}"`. The template is split into words once, when the file is
read (an unknown placeholder stops start-up, naming the rule); each call's preview is then an
argv built word by word from the simple command the rule matched, never a shell string: a
value with spaces or `;` stays one word of the argv.

Placeholders:

- `{command}` — the simple command's words (wrappers peeled); alone in a template word it
  becomes that many argv words, inside a longer word their shell-quoted text.
- `{operands}` — its words after the rule's prefix that are not options (not starting with
  `-`; every word after `--`); alone in a word, one argv word each.
- `{arg:<option>}` — the values given to that option: `-f x`, `-f=x`, `-fx` (or `--file x`,
  `--file=x` for `{arg:--file}`); `{arg:-f|--filename}` takes those of either, in their order.
  Given several times, each value is previewed: a word that holds the placeholder is repeated
  for each, and so is an option word right before a lone placeholder (`-f {arg:-f}` becomes
  `-f a.yaml -f b.yaml`).

A placeholder with no value (no operands, an option not given) makes no argv: the preview
fails with a message saying which, and the card shows "preview failed".

A preview runs in the tool's working directory with the bot's environment, so a previewed part
that a `cd` (`pushd`, `popd`) before it in the same command moved elsewhere, or that runs with
its own assignments (`KUBECONFIG=/prod kubectl ...`), would be previewed against other files or
another cluster than it acts on: its preview fails instead (`in_context`), and the card says so.
So does one with file-name patterns (`-f *.yaml`): the preview's argv is not run by a shell.

A plan also names the files the command reads through `FILE_OPTIONS` (`inputs`): the preview
reads them at preview time, their digests are bound to the approval, and the run refuses if any
changed since (`bot.tools.preview`).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from agent_core import canonical_arguments

from ._fields import fill_preview_args
from ._shell import SimpleCommand

__all__ = [
    "DEFAULT_PREVIEW_TTL",
    "FILE_OPTIONS",
    "PreviewPlan",
    "PreviewTemplate",
    "file_operands",
    "in_context",
    "tool_preview",
]

DEFAULT_PREVIEW_TTL = timedelta(minutes=10)
"""How old a preview may be when the last needed approval arrives before it is run again."""

FILE_OPTIONS = ("-f", "--filename", "-k", "--kustomize")
"""Options whose values are files (or, `-k`, a directory) a command reads: kubectl's, and any
program's the same way (binding a file a preview did not need costs nothing)."""

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
    inputs: tuple[str, ...] = ()
    """The files the command reads through `FILE_OPTIONS`, as written (bound even when
    absent at preview time: a sibling call could create one before the run)."""

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
        inputs = file_operands(part.argv[1:])
        for word in self.words:
            found = _PLACEHOLDER.fullmatch(word)
            if found is not None:
                values = _values(found.group(1), part.argv, len(prefix))
                if values is None:
                    return self._missing(found.group(1), ttl, inputs)
                if found.group(1).startswith("arg:") and argv and _is_option(argv[-1]):
                    option = argv.pop()  # `-f {arg:-f}`: the option before each value
                    values = [w for value in values for w in (option, value)]
                argv += values
                continue
            texts, missing = _fill(word, part.argv, len(prefix))
            if missing is not None:
                return self._missing(missing, ttl, inputs)
            argv += texts
        return PreviewPlan(self.text, tuple(argv), None, ttl or DEFAULT_PREVIEW_TTL, inputs=inputs)

    def _missing(self, name: str, ttl: timedelta | None, inputs: tuple[str, ...]) -> PreviewPlan:
        why = f"no value for {{{name}}} in this command"
        return PreviewPlan(self.text, None, why, ttl or DEFAULT_PREVIEW_TTL, inputs=inputs)


DIRECTORY_CHANGERS = frozenset({"cd", "pushd", "popd"})
"""Programs that change the shell's working directory for the parts after them."""


def in_context(
    plan: PreviewPlan | None, parts: Sequence[SimpleCommand], part: SimpleCommand
) -> PreviewPlan | None:
    """`plan` for `part` (one of the command's `parts`), or a failed plan when the preview
    would not see what the part acts on: a directory change before it, or assignments of
    its own. Its files are not bound either: they would be read in the wrong place."""
    if plan is None or plan.tool is not None:
        return plan
    why: str | None = None
    if part.patterns:
        why = "the previewed part has file-name patterns: the shell expands them, a preview not"
    if part.assignments:
        names = ", ".join(a.partition("=")[0] for a in part.assignments)
        why = f"the previewed part runs with its own environment ({names})"
    at = next((i for i, p in enumerate(parts) if p is part), len(parts))
    if any(p.program in DIRECTORY_CHANGERS for p in parts[:at]):
        why = "the command changes directory before the previewed part"
    if why is None:
        return plan
    return replace(plan, argv=None, missing=why, inputs=())


def tool_preview(
    tool: str,
    template: Mapping[str, Any],
    arguments: Mapping[str, Any],
    defaults: Mapping[str, Any],
    ttl: timedelta | None,
) -> PreviewPlan:
    """The preview of a custom or MCP tool's call: `tool` (read-only, named in the policy)
    called with `preview_args` filled from the call's arguments (`_fields`)."""
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
    options = tuple(name.removeprefix("arg:").split("|"))
    return [value for _, value in option_values(argv[skip:], options)] or None


def _fill(word: str, argv: tuple[str, ...], skip: int) -> tuple[list[str], str | None]:
    """A word with placeholders inside it (`--file={arg:-f}`): their text joined in; a word
    whose `{arg:…}` has several values is repeated for each."""
    names = _PLACEHOLDER.findall(word)
    for name in names:
        values = _values(name, argv, skip)
        if values is None:
            return [], name
        if name.startswith("arg:") and len(values) > 1 and len(names) == 1:
            return [word.replace(f"{{{name}}}", value) for value in values], None

    def one(found: re.Match[str]) -> str:
        values = _values(found.group(1), argv, skip) or []
        return values[0] if len(values) == 1 else shlex.join(values)

    return [_PLACEHOLDER.sub(one, word)], None


def _is_option(word: str) -> bool:
    return word.startswith("-") and word != "-" and "=" not in word


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


def option_values(words: tuple[str, ...], options: tuple[str, ...]) -> list[tuple[str, str]]:
    """Each (option, value) given to one of `options`, in order: the word after it, what
    follows `option=`, or (a one-letter option) what follows it in the same word (`-fx`)."""
    found: list[tuple[str, str]] = []
    index = 0
    while index < len(words):
        word = words[index]
        if word == "--":
            break
        for option in options:
            if word == option:
                if index + 1 < len(words):
                    found.append((option, words[index + 1]))
                index += 1
                break
            if word.startswith(option + "="):
                found.append((option, word[len(option) + 1 :]))
                break
            if len(option) == 2 and option[1] != "-" and word.startswith(option):
                found.append((option, word[2:]))
                break
        index += 1
    return found


def file_operands(words: tuple[str, ...]) -> tuple[str, ...]:
    """The files a command names through `FILE_OPTIONS` (`-` is standard input, not a file),
    each once, in order."""
    found = [value for _, value in option_values(words, FILE_OPTIONS) if value not in ("", "-")]
    return tuple(dict.fromkeys(found))
