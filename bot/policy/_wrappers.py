"""Wrappers (`sudo`, `env`, `timeout`, `setsid`, `flock`, ...), shells and builtins that evaluate
text: how to find the command a wrapper runs, and the script `sh -c` runs, so that the policy
judges that.

A wrapper is peeled only when its options are all known (the table is `_wrapper_table`): an
unknown option could take the next word as its value, and then what looks like the inner command
is not. `sudo -i`, `env -S`, `command -v` make it unreadable. Assignment words after `env` or
`sudo` (`env -- A=1 rm x`) are peeled too, so the inner command is still judged, and reported,
since they change what runs (`PATH`, `LD_PRELOAD`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ._wrapper_table import WRAPPERS, Wrapper

__all__ = [
    "DEFERRED",
    "EVALUATING",
    "SHELLS",
    "WRAPPERS",
    "Peeled",
    "Wrapper",
    "evaluates",
    "find_exec",
    "peel",
    "shell_script",
]

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "fish"})
DEFERRED = frozenset({"eval", "source", ".", "alias", "trap"})
"""Builtins that run text later or elsewhere: `eval` (parsed again), `source` and `.` (a
file), `alias` (a later word runs something else), `trap` (runs its text on a signal)."""

EVALUATING = frozenset(
    {
        "hash",
        "enable",
        "shopt",
        "let",
        "read",
        "mapfile",
        "readarray",
        "declare",
        "typeset",
        "local",
        "export",
        "readonly",
        "getopts",
        "compgen",
        "complete",
        "compopt",
        "bind",
        "fc",
        "history",
        "coproc",
        "select",
    }
)
"""Bash builtins that can evaluate text the words do not show (an array subscript is
arithmetic, which runs `$(...)`; `hash -p` and `enable -f` change what a name runs; `fc` runs
history): a call using them needs a card whatever `/bin/sh` is."""
_NUMERIC = frozenset({"shift", "break", "continue", "return", "exit"})
"""Builtins that take a number, evaluated as arithmetic by some shells when it is not one."""
_SET_SAFE = re.compile(r"^[-+][euxvCo]+$|^(pipefail|errexit|nounset|xtrace|noclobber)$")
_EXEC_ARGS = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def evaluates(argv: tuple[str, ...]) -> bool:
    """Whether a simple command is a builtin that can evaluate text (see `EVALUATING`)."""
    program, rest = (argv[0], argv[1:]) if argv else ("", ())
    if program in EVALUATING:
        return True
    if program == "printf" or program == "wait":
        flag = "-v" if program == "printf" else "-p"
        return any(w.startswith(flag) for w in rest)
    if program in ("test", "["):
        return any(w in ("-v", "-R") for w in rest)
    if program in _NUMERIC:
        return any(not w.isdigit() for w in rest)
    if program == "set":
        return not all(_SET_SAFE.match(w) for w in rest)
    return False


@dataclass(frozen=True, slots=True)
class Peeled:
    """What a wrapper runs: a command (`argv`, maybe empty), or a shell `script`."""

    argv: tuple[str, ...]
    assignments: tuple[str, ...] = ()
    script: str | None = None
    writes: tuple[str, ...] = ()


def _option(word: str, wrapper: Wrapper) -> tuple[str, str | None, int] | None:
    """An option word's kind ("valued", "plain", "opaque", "script"), its attached value, and how
    many words it spans (0: unknown)."""
    name, _, value = word.partition("=")
    long = word.startswith("--")
    attached = value if "=" in word else None
    for kind, names in (("opaque", wrapper.opaque), ("script", wrapper.script)):
        if name in names or (not long and word[:2] in names):
            attached = attached if long or len(word) == 2 else word[2:]
            return kind, attached, 1 if attached is not None or kind == "opaque" else 2
    if name in wrapper.valued:
        return "valued", attached, 1 if attached is not None else 2
    if not long and word[:2] in wrapper.valued:
        return "valued", word[2:], 1
    if (
        word in wrapper.plain
        or (long and name in wrapper.plain)
        or (wrapper.numeric and word[1:].isdigit())
        or (wrapper.long_any and long)
        or (not long and all(f"-{c}" in wrapper.plain for c in word[1:]))
    ):
        return "plain", None, 1
    return None


def peel(argv: tuple[str, ...], wrapper: Wrapper) -> Peeled | None:  # noqa: C901
    """The command a wrapper runs; None when its options make it unreadable."""
    index, positional, script, permute = 1, wrapper.positional, None, wrapper.permute
    commanded = False
    writes: list[str] = []
    rest: list[str] = []
    while index < len(argv):
        word = argv[index]
        if word == "--":
            index += 1
            break
        if (word.startswith("-") and len(word) > 1) or word in wrapper.plain:
            option = _option(word, wrapper)
            if option is None or option[0] == "opaque":
                return None
            kind, value, span = option
            if value is None and span == 2:
                if index + 1 >= len(argv):
                    return None
                value = argv[index + 1]
            if kind == "script":
                script = value
            elif kind == "valued" and word.partition("=")[0] in wrapper.writes:
                writes.append(value or "")
            commanded = commanded or word.partition("=")[0] in wrapper.command_with
            permute = permute and not commanded
            index += span
            continue
        if permute:
            rest.append(word)
            index += 1
            continue
        if positional:
            positional -= 1
            index += 1
            continue
        break
    inner = argv[index:]
    if rest and not permute:
        return None  # `runuser USER -u ...`: neither form
    if permute:
        if script is None:
            return None
        rest.extend(inner)
        return Peeled((), (), script, tuple(rest) if wrapper.writes_rest else ())
    if positional or (script is not None and inner):
        return None
    if wrapper.joins and not commanded and inner:
        script = " ".join(inner)  # `watch` hands its words to `sh -c`
    if script is not None:
        return Peeled((), (), script, tuple(writes))
    count = 0
    while wrapper.assignments and count < len(inner) and _ASSIGNMENT.match(inner[count]):
        count += 1
    if inner[count:] and _ASSIGNMENT.match(inner[count]):
        return None  # `nice A=1 ls` runs a program named `A=1`: not what it looks like
    return Peeled(inner[count:], inner[:count], None, tuple(writes))


def shell_script(argv: tuple[str, ...]) -> str | None:
    """The script of `sh -c SCRIPT` (also `bash -lc`, `bash -e -c`), or None."""
    for index, word in enumerate(argv[1:], start=1):
        if not word.startswith("-"):
            return None
        if "c" in word[1:] and not word.startswith("--"):
            return argv[index + 1] if index + 1 < len(argv) else None
    return None


def find_exec(argv: tuple[str, ...]) -> list[tuple[int, int]]:
    """Where the commands of `find`'s `-exec`, `-execdir`, `-ok` and `-okdir` stand in its words
    (each runs to its `;` or `+`)."""
    found: list[tuple[int, int]] = []
    index = 1
    while index < len(argv):
        if argv[index] in _EXEC_ARGS:
            end = next((i for i in range(index + 1, len(argv)) if argv[i] in (";", "+")), None)
            found.append((index + 1, len(argv) if end is None else end))
            index = len(argv) if end is None else end
        index += 1
    return found
