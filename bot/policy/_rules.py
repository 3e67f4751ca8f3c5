"""`[[tools.<name>.rules]]`: one rule of a tool whose `approval = "rules"`.

A rule matches a call either by its parsed shell command (`prefix`, `run_command` only: the
first words, then an optional regex on the rest) or by one argument (`argument` + `pattern`, as
before). It says what a matched call gets (`approval`: never, always, forbidden) and may replace
the channel's approvers, quorum, time limit and allowance window for the calls it matches. Its
`examples` and `not_examples` are checked when the file is read, so a rule that does not match
what its author meant stops start-up, named `tools.<tool>.rules[<index>]`.

Whether a word the shell rewrites before it runs could be a rule's fixed word.

A file-name pattern (`/usr/bin/r[m]`, `n[s]`) becomes the names of matching files, so what runs
is not in the text; an ANSI-C quoted word (`$'rm'`, `$'\\x72m'`) is a fixed word written
otherwise. A rule must not be dodged by either: a rule that asks or forbids applies to a pattern
that could stand for its word (`fnmatch`), and to a quoted word that decodes to it. A free rule
is never matched by a pattern: the files present decide what it becomes.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import replace
from fnmatch import fnmatchcase
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    model_validator,
)
from pydantic_core import PydanticCustomError

from ._fields import (
    AllowWindow,
    Approvals,
    ApproverId,
    Duration,
    Regex,
    argument_label,
    argument_matches,
    check_reachable,
)
from ._oncall import EscalationStep, check_ladder
from ._preview import PreviewPlan, PreviewTemplate
from ._programs import Layout, layout
from ._shell import SimpleCommand, parse_command

__all__ = [
    "NEEDS_MATCH",
    "TIER_RANK",
    "Fit",
    "Rule",
    "Tier",
    "ansi_c",
    "program_is",
    "word_fits",
]

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


NEEDS_MATCH = "rule_needs_match"
"""The error type of a rule with neither `argument` nor `prefix` (`_load` names the key)."""

Tier = Literal["never", "always", "forbidden"]
"""What a matched call gets: runs without approval, waits for approval, or never runs."""
TIER_RANK: dict[Tier, int] = {"never": 0, "always": 1, "forbidden": 2}

Word = Annotated[StrictStr, Field(min_length=1)]
Words = Annotated[tuple[Word, ...], Field(min_length=1)]


def _text(value: str) -> str:
    if not value.strip():
        raise ValueError("is empty; remove the key or write the text")
    return value.strip()


Text = Annotated[StrictStr, AfterValidator(_text), Field(max_length=500)]
Example = StrictStr | dict[str, Any]
Fit = Literal["yes", "maybe"]
"""How a rule fits a simple command: it matches, or it could (the verb's place is unknown)."""


class Rule(BaseModel):
    """One `[[tools.<name>.rules]]` entry (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prefix: Words | None = None
    """run_command: the command's first words (`["kubectl", "delete"]`); the program also
    matches by its base name (`/usr/bin/kubectl`)."""
    argument: Word | None = None
    """Other tools (and run_command, as before): the argument `pattern` is searched in."""
    pattern: Regex | None = None
    """With `prefix`: searched in the words after it, shell-quoted (`shlex.join`); with
    `argument`: searched in that argument's value."""
    name: StrictStr | None = None
    approval: Tier = "always"
    justification: Text | None = None
    """Why: shown on the card and in `policy explain`, told to the model when forbidden."""
    approvers: tuple[ApproverId, ...] | None = None
    """Replace the channel's approvers for the calls this rule decides."""
    required_approvals: Approvals | None = None
    ttl: Duration | None = None
    allow_for: AllowWindow | None = None
    allow_prefix: Words | None = None
    """The argv prefix an "Allow for" on a call of this rule covers (instead of the exact argv);
    it starts with `prefix`."""
    break_glass: StrictBool = False
    """During a change freeze, cards of the calls this rule decides offer "Break glass"."""
    examples: tuple[Example, ...] = ()
    not_examples: tuple[Example, ...] = ()
    preview: StrictStr | None = None
    """run_command: a read-only command template run before the card is posted, its output
    shown on the card and bound to the approval (`bot.policy._preview`)."""
    preview_ttl: Duration | None = None
    """How old the preview may be when the last approval arrives (default 10m)."""
    remind_every: Duration | None = None
    """Replace `defaults.remind_every` for the calls this rule decides."""
    remind_max: Approvals | None = None
    escalate: tuple[EscalationStep, ...] | None = None
    """Replace `defaults.escalate` for the calls this rule decides (`[]`: none)."""

    @model_validator(mode="after")
    def _consistent(self) -> Rule:
        if self.prefix is None and self.argument is None:
            raise PydanticCustomError(NEEDS_MATCH, "a rule needs `argument` or `prefix`")
        if self.prefix is not None and self.argument is not None:
            raise ValueError("a rule has either `prefix` (run_command) or `argument`, not both")
        if self.argument is not None and self.pattern is None:
            raise ValueError("an `argument` rule needs a `pattern`")
        prefix = self.prefix or ()
        if self.allow_prefix is not None and (
            not prefix or self.allow_prefix[: len(prefix)] != prefix
        ):
            raise ValueError("allow_prefix must start with the rule's prefix")
        unused = [
            k
            for k in (
                "approvers",
                "required_approvals",
                "ttl",
                "allow_for",
                "allow_prefix",
                "preview",
                "preview_ttl",
                "remind_every",
                "remind_max",
                "escalate",
            )
            if getattr(self, k) is not None
        ]
        if self.approval != "always" and unused:
            raise ValueError(
                f"{', '.join(unused)} apply only to calls that wait for approval, "
                f'but this rule says approval = "{self.approval}"'
            )
        if self.break_glass and self.approval == "forbidden":
            raise ValueError("break_glass: a forbidden call is never run, so it cannot be broken")
        if self.approvers is not None:
            check_reachable(self.approvers, self.required_approvals or 1, "approvers")
        if self.escalate and self.required_approvals is not None:
            check_ladder(self.escalate, self.required_approvals, self.ttl, "escalate")
        self._check_preview()
        self._check_examples()
        return self

    def _check_preview(self) -> None:
        if self.preview is None:
            if self.preview_ttl is not None:
                raise ValueError("preview_ttl needs a `preview`")
            return
        if self.prefix is None:
            raise ValueError(
                "a rule's `preview` is built from a parsed command: it needs `prefix` (other "
                "tools name a read-only tool in [tools.NAME] preview)"
            )
        if self.allow_for is not None or self.allow_prefix is not None:
            raise ValueError(
                'a rule with a `preview` offers no "Allow for" (an allowed call would run '
                "without its preview): remove allow_for / allow_prefix"
            )
        PreviewTemplate.parse(self.preview)

    def preview_for(self, part: SimpleCommand) -> PreviewPlan | None:
        """The preview of `part` (a simple command this rule matched); None without one."""
        if self.preview is None or self.prefix is None:
            return None
        template = PreviewTemplate.parse(self.preview)
        return template.expand(self.aligned(part), self.prefix, self.preview_ttl)

    def _check_examples(self) -> None:
        for example in self.examples:
            if not self.matches_example(example):
                raise ValueError(f"example {example!r} does not match this rule")
        for example in self.not_examples:
            if self.matches_example(example):
                raise ValueError(f"not_example {example!r} matches this rule")

    def matches_example(self, example: Example) -> bool:
        if self.prefix is not None:
            if not isinstance(example, str):
                raise ValueError(f"examples of a prefix rule are commands (text), not {example!r}")
            return any(self.matches_command(p) for p in parse_command(example).parts)
        if not isinstance(example, dict):
            raise ValueError(
                f"examples of an argument rule are tables of arguments, like "
                f'{{{self.argument} = "..."}}, not {example!r}'
            )
        return self.matches_arguments(example, {})

    def matches_command(self, part: SimpleCommand) -> bool:
        """Whether one simple command surely starts with `prefix` (and its rest matches
        `pattern`): the program, then the verb after the options it takes before it."""
        return self.fits(part) == "yes"

    def fits(self, part: SimpleCommand) -> Fit | None:
        """ "yes": `part` matches; "maybe": it could (an option the program's table does not
        know hides where its verb is, and `prefix` is found at a later word); None: it does
        not. The pattern is tried on the words after the prefix, and on them with the options
        before the verb in front: a rule that asks or forbids matches if either does, a free
        (`never`) rule only if both do."""
        if self.prefix is None:
            return None
        argv, prefix = part.argv, self.prefix
        if not argv or not self._words_at(part, 0, prefix[:1]):
            return None
        argv = (prefix[0], *argv[1:])  # `/usr/bin/r[m]`, `$'rm'`: laid out as the rule's program
        if len(prefix) == 1 or prefix[1].startswith("-"):  # no verb: the words as written
            if not self._words_at(part, 1, prefix[1:]):
                return None
            return "yes" if self._rest_matches(argv[len(prefix) :], ()) else None
        where = layout(argv)
        if where.verb is not None:
            verb = where.verb
            if not self._words_at(part, verb, prefix[1:]):
                return None
            rest = argv[verb + len(prefix) - 1 :]
            return "yes" if self._rest_matches(rest, where.leading(argv)) else None
        start = argv.index(where.unknown or "", 1) + 1
        for verb in range(start, len(argv) - len(prefix) + 2):
            if self._words_at(part, verb, prefix[1:]):
                rest = argv[verb + len(prefix) - 1 :]
                if self._rest_matches(rest, argv[1:verb]):
                    return "maybe"
        return None

    def _words_at(self, part: SimpleCommand, start: int, words: tuple[str, ...]) -> bool:
        """Whether `part`'s words from `start` could be `words` (`word_fits`: a
        pattern or an ANSI-C quoted word counts where this rule asks or forbids)."""
        found = part.argv[start : start + len(words)]
        if len(found) != len(words):
            return False
        loose = self.approval != "never"
        return all(
            word_fits(
                word,
                expected,
                pattern=start + k in part.patterns,
                loose=loose,
                program=start + k == 0,
            )
            for k, (word, expected) in enumerate(zip(found, words, strict=True))
        )

    def _rest_matches(self, rest: tuple[str, ...], leading: tuple[str, ...]) -> bool:
        if self.pattern is None:
            return True
        found = [self.pattern.search(shlex.join(rest)) is not None]
        if leading:
            found.append(self.pattern.search(shlex.join((*leading, *rest))) is not None)
        return all(found) if self.approval == "never" else any(found)

    def aligned(self, part: SimpleCommand) -> SimpleCommand:
        """`part` with the options before its verb moved after the prefix (for a preview
        built from the words after the prefix)."""
        if self.prefix is None or len(self.prefix) < 2:
            return part
        where: Layout = layout(part.argv)
        leading = where.leading(part.argv)
        if where.verb is None or not leading:
            return part
        after = part.argv[where.verb + len(self.prefix) - 1 :]
        argv = (part.argv[0], *self.prefix[1:], *leading, *after)
        return replace(part, argv=argv)

    def matches_arguments(self, arguments: Mapping[str, Any], defaults: Mapping[str, Any]) -> bool:
        if self.argument is None or self.pattern is None:
            return False
        return argument_matches(self.argument, self.pattern, arguments, defaults)

    @property
    def label(self) -> str:
        """How `/opsgate help`, cards and the audit name what the rule matches."""
        if self.name:
            return self.name
        if self.prefix is not None:
            words = shlex.join(self.prefix)
            return f"{words} … matching /{self.pattern.pattern}/" if self.pattern else f"{words} …"
        assert self.argument is not None and self.pattern is not None
        return argument_label(self.argument, self.pattern)


def program_is(program: str, name: str) -> bool:
    """`kubectl` is `kubectl`, and so is `/usr/bin/kubectl` (a rule must not be dodged by a
    path; matching more only ever asks more)."""
    return program == name or ("/" in program and os.path.basename(program) == name)
