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
from dataclasses import dataclass, field

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


_Option = tuple[str, str, str | None, int]
"""An option's kind ("valued", "plain", "opaque", "script"), its name, its attached value, and
how many words it spans."""


def _option(word: str, wrapper: Wrapper) -> _Option | None:
    """What an option word is; None if unknown. Short options cluster as getopt reads them:
    `-qc CMD` and `-n5` are plain options up to one that takes the rest of the word, or the
    next word."""
    if word.startswith("--") or word in wrapper.plain:
        return _long(word, wrapper)
    if wrapper.numeric and word[1:].isdigit():
        return "plain", word, None, 1
    for index, char in enumerate(word[1:], start=2):
        flag, rest = f"-{char}", word[index:] or None
        if flag in wrapper.opaque:
            return "opaque", flag, None, 1
        for kind, names in (("script", wrapper.script), ("valued", wrapper.valued)):
            if flag in names:
                return kind, flag, rest, 1 if rest is not None else 2
        if flag not in wrapper.plain:
            return None
    return "plain", word, None, 1


def _long(word: str, wrapper: Wrapper) -> _Option | None:
    """A long option (`--user=ops`, `--user ops`), or a word the wrapper lists whole (`-`)."""
    name, equals, value = word.partition("=")
    attached = value if equals else None
    if name in wrapper.opaque:
        return "opaque", name, None, 1
    for kind, names in (("script", wrapper.script), ("valued", wrapper.valued)):
        if name in names:
            return kind, name, attached, 1 if attached is not None else 2
    if name in wrapper.plain or (wrapper.long_any and name.startswith("--")):
        return "plain", name, None, 1
    return None


@dataclass
class _Scan:
    """The words before a wrapper's command, read one by one."""

    wrapper: Wrapper
    index: int = 1
    script: str | None = None
    commanded: bool = False
    """An option of `command_with` was seen: the words after the options are a command."""
    writes: list[str] = field(default_factory=list)
    rest: list[str] = field(default_factory=list)
    """Other words of a `permute` wrapper (`su`'s user, `script`'s file)."""

    def option(self, argv: tuple[str, ...]) -> bool:
        """Read the option at `index`; False when it makes the wrapper unreadable."""
        option = _option(argv[self.index], self.wrapper)
        if option is None or option[0] == "opaque":
            return False
        kind, name, value, span = option
        if value is None and span == 2:
            if self.index + 1 >= len(argv):
                return False
            value = argv[self.index + 1]
        if kind == "script":
            self.script = value
        elif kind == "valued" and name in self.wrapper.writes:
            self.writes.append(value or "")
        self.commanded = self.commanded or name in self.wrapper.command_with
        self.index += span
        return True

    @property
    def permute(self) -> bool:
        return self.wrapper.permute and not self.commanded


def _scan(argv: tuple[str, ...], wrapper: Wrapper) -> _Scan | None:
    """Read a wrapper's options and positional words, up to its command."""
    scan, positional = _Scan(wrapper), wrapper.positional
    while scan.index < len(argv):
        word = argv[scan.index]
        if word == "--":
            scan.index += 1
            break
        if (word.startswith("-") and len(word) > 1) or word in wrapper.plain:
            if not scan.option(argv):
                return None
        elif scan.permute:
            scan.rest.append(word)
            scan.index += 1
        elif positional:
            positional -= 1
            scan.index += 1
        else:
            break
    return None if positional and not scan.permute else scan


def peel(argv: tuple[str, ...], wrapper: Wrapper) -> Peeled | None:
    """The command a wrapper runs; None when its options make it unreadable."""
    scan = _scan(argv, wrapper)
    if scan is None or (scan.rest and not scan.permute):
        return None  # `runuser USER -u ...`: neither form
    inner, script = argv[scan.index :], scan.script
    if scan.permute:
        if script is None:
            return None
        rest = (*scan.rest, *inner) if wrapper.writes_rest else ()
        return Peeled((), (), script, rest)
    if script is not None and inner:
        return None
    if wrapper.joins and not scan.commanded and inner:
        script = " ".join(inner)  # `watch` hands its words to `sh -c`
    if script is not None:
        return Peeled((), (), script, tuple(scan.writes))
    count = 0
    while wrapper.assignments and count < len(inner) and _ASSIGNMENT.match(inner[count]):
        count += 1
    if inner[count:] and _ASSIGNMENT.match(inner[count]):
        return None  # `nice A=1 ls` runs a program named `A=1`: not what it looks like
    return Peeled(inner[count:], inner[:count], None, tuple(scan.writes))


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
