"""Call shapes: what a later call must look like to run under an allowance.

By default the shape is the exact arguments. For `run_command` it is the program and its
subcommand (the first word after the program that is not an option), for a command that
`shlex` parses and that has no shell operators, redirections or substitutions; such a
character anywhere, even quoted, makes a command fall back to the exact shape (and a later
command with one never matches a command shape). Conservative on purpose: a call that does not
match simply gets a card.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any, Literal

from agent_core import canonical_arguments

__all__ = ["CommandShape", "ExactShape", "Shape", "dump_shape", "load_shape", "shape_of"]

COMMAND_TOOL = "run_command"
_SHELL_CHARACTERS = frozenset(";&|<>()$`\n\r")
"""Operators (; & | && ||), redirections (< >), subshells and substitutions ($ `)."""


@dataclass(frozen=True, slots=True)
class ExactShape:
    """Calls with exactly these (canonical) arguments."""

    arguments: str
    kind: Literal["exact"] = "exact"

    def matches(self, arguments: dict[str, Any]) -> bool:
        return canonical_arguments(arguments) == self.arguments

    def label(self, tool: str) -> str:
        return f"{tool} with exactly {self.arguments}"


@dataclass(frozen=True, slots=True)
class CommandShape:
    """`run_command` calls of `program` with `subcommand` (None: no positional word) and no
    shell operators, redirections or substitutions."""

    program: str
    subcommand: str | None
    kind: Literal["command"] = "command"

    def matches(self, arguments: dict[str, Any]) -> bool:
        command = arguments.get("command")
        return isinstance(command, str) and _program_and_subcommand(command) == (
            self.program,
            self.subcommand,
        )

    def label(self, tool: str) -> str:
        words = self.program if self.subcommand is None else f"{self.program} {self.subcommand}"
        return f"{words} … (no shell operators, redirections or substitutions)"


Shape = ExactShape | CommandShape


def shape_of(tool: str, arguments: dict[str, Any]) -> Shape:
    """The shape an allowance granted on this call covers."""
    if tool == COMMAND_TOOL and isinstance(arguments.get("command"), str):
        parsed = _program_and_subcommand(arguments["command"])
        if parsed is not None:
            return CommandShape(*parsed)
    return ExactShape(canonical_arguments(arguments))


def dump_shape(shape: Shape) -> str:
    if isinstance(shape, CommandShape):
        return json.dumps(
            {"kind": "command", "program": shape.program, "subcommand": shape.subcommand}
        )
    return json.dumps({"kind": "exact", "arguments": shape.arguments})


def load_shape(text: str) -> Shape | None:
    """A stored shape; None for one this version does not know (it then matches nothing)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    if data.get("kind") == "command" and isinstance(data.get("program"), str):
        sub = data.get("subcommand")
        return CommandShape(data["program"], sub if isinstance(sub, str) else None)
    if data.get("kind") == "exact" and isinstance(data.get("arguments"), str):
        return ExactShape(data["arguments"])
    return None


def _program_and_subcommand(command: str) -> tuple[str, str | None] | None:
    if any(c in _SHELL_CHARACTERS for c in command):
        return None
    try:
        words = shlex.split(command, comments=False, posix=True)
    except ValueError:  # unbalanced quotes
        return None
    if not words:
        return None
    program, rest = words[0], words[1:]
    subcommand = next((w for w in rest if not w.startswith("-")), None)
    return program, subcommand
