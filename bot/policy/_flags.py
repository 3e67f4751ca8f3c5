"""Why a shell command cannot be judged by its words alone: the flags the parser (`_shell`) sets
on a command and its parts, which of them need a card, and the words the card and `policy
explain` say for each.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["FLAG_WORDS", "UNJUDGEABLE", "Flag"]

Flag = Literal[
    "unparsable",
    "ambiguous",
    "program",
    "substitution",
    "eval",
    "shell",
    "wrapper",
    "expansion",
    "assignment",
    "evaluates",
    "redirection",
    "writes_file",
    "glob",
]
"""Why a command cannot be judged by its words alone (see `UNJUDGEABLE`). `redirection`: any
redirection (a plain read or `2>&1` too); `writes_file`: output redirected to a file; `glob`:
an argument is a file-name pattern (informational: the program is still known)."""

UNJUDGEABLE: frozenset[Flag] = frozenset(
    {
        "unparsable",
        "ambiguous",
        "program",
        "substitution",
        "eval",
        "shell",
        "wrapper",
        "expansion",
        "assignment",
        "evaluates",
        "writes_file",
    }
)
"""Flags that make a command need approval at least under `approval = "rules"`."""

FLAG_WORDS: dict[Flag, str] = {
    "unparsable": "does not parse (or uses syntax the policy does not judge)",
    "ambiguous": "may be read differently by the shell than by the policy (a line continuation"
    " inside a word or before a comment, `;;` outside case, a control character)",
    "program": "runs a program (or wrapper) named by a pattern or an expansion, not a literal word",
    "substitution": "uses command substitution",
    "eval": "uses eval or source",
    "shell": "runs a shell (sh -c, bash script)",
    "wrapper": "runs its command through a wrapper whose inner command cannot be judged",
    "expansion": "has words that expand at run time",
    "assignment": "sets variables",
    "evaluates": "uses a bash feature that can evaluate text as code (hash, shopt, let, read,"
    " printf -v, [[ -v ]], (( )), an array subscript, ${x@P}, coproc)",
    "redirection": "redirects input or output",
    "writes_file": "writes to a file",
    "glob": "has file-name patterns",
}
