"""Time-boxed allowances: which later calls an "Allow for <duration>" click covers, as call
shapes (what a later call must look like to run under an allowance).

`offered_shapes` lists the shapes a call on a card may be allowed as, each with examples it
covers and does not (`examples_for`), for the granter to choose from and see; `shape_of` is the
one a click without a choice creates. `covers` decides a later call against a stored shape
(`load_shape`; `dump_shape` writes it). The store keeps the allowances
(`Store.create_allowance`, `active_allowances`, `revoke_allowance`); the run service's gate
(`bot.runs.edits`) applies them. See `docs/architecture.md`.

A shape is chosen from what the call on the card offers, never guessed from a program's syntax:
the exact argv (the default), or an argv prefix with no option before its last fixed word
(`kubectl get pods` covers `kubectl get pods -n a`; `git --namespace status` offers only its
exact argv, because `status` there may be the value of `--namespace`), or the prefix the
deciding policy rule declares (`allow_prefix`). Words are compared position by position after
the shell parse, so an option's value never passes for a subcommand.

A shape covers a later call only if that call is one plain simple command the parser fully
understands (no pipe, list, redirection, substitution, expansion, file-name pattern, wrapper,
nor text bash may read otherwise, such as a line continuation before a comment:
`kubectl rollout restart deploy/web\\<newline>#;rm y` is two commands to bash), decided by the
same policy rule as the granted one, not forbidden and needing one approval (`covers`). Other
tools' shapes are the exact canonical arguments. Conservative on purpose: a call that does not
match gets a card.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any, Literal

from agent_core import canonical_arguments

from .policy import GateDecision, parse_command

__all__ = [
    "ArgvShape",
    "ExactShape",
    "Shape",
    "covers",
    "dump_shape",
    "examples_for",
    "load_shape",
    "offered_shapes",
    "shape_of",
]

COMMAND_TOOL = "run_command"


@dataclass(frozen=True, slots=True)
class ExactShape:
    """Calls with exactly these (canonical) arguments (tools other than run_command)."""

    arguments: str
    rule: str | None = None
    kind: Literal["exact"] = "exact"

    def matches(self, arguments: dict[str, Any]) -> bool:
        return canonical_arguments(arguments) == self.arguments

    def label(self, tool: str) -> str:
        return f"{tool} with exactly {self.arguments}"


@dataclass(frozen=True, slots=True)
class ArgvShape:
    """run_command calls of one plain simple command whose words are `argv` (exactly, or, with
    `prefix`, starting with them)."""

    argv: tuple[str, ...]
    prefix: bool = False
    rule: str | None = None
    """The policy rule that decided the granted call; a later call must be decided by it too."""
    kind: Literal["argv"] = "argv"

    def matches(self, arguments: dict[str, Any]) -> bool:
        command = arguments.get("command")
        if not isinstance(command, str):
            return False
        return self.matches_argv(_plain_argv(command))

    def matches_argv(self, argv: tuple[str, ...] | None) -> bool:
        if argv is None:
            return False
        if self.prefix:
            return argv[: len(self.argv)] == self.argv
        return argv == self.argv

    def label(self, tool: str) -> str:
        words = shlex.join(self.argv)
        if not self.prefix:
            return f"exactly {words}"
        return f"{words} … (no shell operators, redirections or substitutions)"


Shape = ExactShape | ArgvShape


def _plain_argv(command: str) -> tuple[str, ...] | None:
    """The words of a command that is one plain, fully understood simple command with no
    wrapper and nothing written, else None."""
    parsed = parse_command(command)
    if not parsed.plain or parsed.unjudgeable:
        return None
    part = parsed.parts[0]
    if part.wrappers or part.writes or part.nested or not part.argv:
        return None
    return part.argv


def offered_shapes(
    tool: str, arguments: dict[str, Any], decision: GateDecision | None = None
) -> tuple[Shape, ...]:
    """The shapes an "Allow for" on this call may create, the default first; none for a call an
    allowance may never cover (compound, redirected, substituted, wrapped, forbidden)."""
    rule = decision.policy_rule if decision is not None else None
    if decision is not None and decision.forbidden:
        return ()
    if tool != COMMAND_TOOL:
        return (ExactShape(canonical_arguments(arguments), rule),)
    command = arguments.get("command")
    argv = _plain_argv(command) if isinstance(command, str) else None
    if argv is None:
        return ()
    shapes: list[Shape] = [ArgvShape(argv, False, rule)]
    declared = decision.allow_prefix if decision is not None else None
    if declared is not None:
        if argv[: len(declared)] == declared:
            shapes.append(ArgvShape(declared, True, rule))
        return tuple(shapes)
    fixed = next((i for i, w in enumerate(argv) if i and w.startswith("-")), len(argv))
    shapes += [ArgvShape(argv[:k], True, rule) for k in range(fixed, 1, -1)]
    return tuple(shapes)


def shape_of(
    tool: str, arguments: dict[str, Any], decision: GateDecision | None = None
) -> Shape | None:
    """The shape an "Allow for" click creates: the rule's declared prefix when it has one,
    else the exact call; None when no allowance may cover the call."""
    shapes = offered_shapes(tool, arguments, decision)
    if not shapes:
        return None
    if decision is not None and decision.allow_prefix is not None:
        return shapes[-1]
    return shapes[0]


def covers(shape: Shape, tool: str, arguments: dict[str, Any], decision: GateDecision) -> bool:
    """Whether an allowance of `shape` lets this call run without a card (see the docstring;
    the caller checks the channel, the tool and that one approval is needed)."""
    if decision.forbidden or decision.policy_rule != shape.rule:
        return False
    return shape.matches(arguments)


def examples_for(shape: Shape) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Three commands the shape covers and three it does not, generated from it, for the
    granter to see what they allow (run_command shapes; other tools: the exact arguments)."""
    if isinstance(shape, ExactShape):
        return (shape.arguments,), ("any other arguments",)
    words = list(shape.argv)
    program, last = words[0], words[-1]
    if shape.prefix:
        matching = (
            shlex.join(words),
            shlex.join([*words, "-o", "wide"]),
            shlex.join([*words, "other-arg"]),
        )
    else:
        matching = (
            shlex.join(words),
            " ".join(shlex.quote(w) for w in words).replace(" ", "  ", 1),
            " ".join(f"'{w}'" if "'" not in w else shlex.quote(w) for w in words),
        )
    inserted = [program, "--namespace", "x", *words[1:]] if len(words) > 1 else [program, "-x"]
    different = [*words[:-1], f"not-{last}"] if len(words) > 1 else [f"{program}2"]
    not_matching = (
        f"{shlex.join(words)}; rm -rf x" if shape.prefix else shlex.join([*words, "--force"]),
        shlex.join(inserted),
        shlex.join(different),
    )
    return matching, not_matching


def dump_shape(shape: Shape) -> str:
    if isinstance(shape, ArgvShape):
        return json.dumps(
            {"kind": "argv", "argv": list(shape.argv), "prefix": shape.prefix, "rule": shape.rule}
        )
    return json.dumps({"kind": "exact", "arguments": shape.arguments, "rule": shape.rule})


def load_shape(text: str) -> Shape | None:
    """A stored shape; None for one this version does not know (it then matches nothing)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    rule = data.get("rule") if isinstance(data.get("rule"), str) else None
    match data.get("kind"):
        case "argv" if isinstance(data.get("argv"), list) and data["argv"]:
            argv = data["argv"]
            if all(isinstance(w, str) for w in argv):
                return ArgvShape(tuple(argv), data.get("prefix") is True, rule)
        case "exact" if isinstance(data.get("arguments"), str):
            return ExactShape(data["arguments"], rule)
        case "command" if isinstance(data.get("program"), str) and isinstance(
            data.get("subcommand"), str
        ):
            # In older releases: program and subcommand. Read as the strict argv prefix.
            return ArgvShape((data["program"], data["subcommand"]), True, None)
    return None
