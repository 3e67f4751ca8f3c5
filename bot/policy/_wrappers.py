"""Wrappers (`sudo`, `env`, `timeout`, `nice`, `nohup`, `xargs`, `watch`, ...) and shells: how to
find the command a wrapper runs, and the script `sh -c` runs, so that the policy judges that.

A wrapper is peeled only when its options are all known: an unknown option could take the next
word as its value, and then what looks like the inner command is not (the same hole as an
allowance's option-value one). `sudo -i`, `env -S`, `command -v` make it unreadable.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFERRED", "SHELLS", "WRAPPERS", "Wrapper", "peel", "shell_script"]

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "fish", "busybox"})
DEFERRED = frozenset({"eval", "source", ".", "alias", "trap"})
"""Builtins that run text later or elsewhere: `eval` (parsed again), `source` and `.` (a
file), `alias` (a later word runs something else), `trap` (runs its text on a signal)."""


@dataclass(frozen=True, slots=True)
class Wrapper:
    """How to find the command a wrapper runs: options with a value, options without, options
    that make the inner command unreadable, and positional words before the command."""

    valued: frozenset[str] = frozenset()
    plain: frozenset[str] = frozenset()
    opaque: frozenset[str] = frozenset()
    positional: int = 0
    judgeable: bool = True
    """False (xargs, watch): the inner command is judged, and the call still needs approval."""


WRAPPERS: dict[str, Wrapper] = {
    "sudo": Wrapper(
        valued=frozenset({"-u", "--user", "-g", "--group", "-p", "--prompt", "-C", "-h", "-D"}),
        plain=frozenset({"-E", "-H", "-n", "-S", "-P", "-k", "--preserve-env"}),
        opaque=frozenset({"-i", "-s", "-e", "-l", "-v", "-K", "--login", "--shell", "--edit"}),
    ),
    "timeout": Wrapper(
        valued=frozenset({"-s", "--signal", "-k", "--kill-after"}),
        plain=frozenset({"--preserve-status", "--foreground", "-v", "--verbose"}),
        positional=1,
    ),
    "nice": Wrapper(valued=frozenset({"-n", "--adjustment"})),
    "nohup": Wrapper(),
    "env": Wrapper(
        valued=frozenset({"-u", "--unset", "-C", "--chdir"}),
        plain=frozenset({"-i", "--ignore-environment", "-0", "--null", "-"}),
        opaque=frozenset({"-S", "--split-string"}),
    ),
    "exec": Wrapper(valued=frozenset({"-a"}), plain=frozenset({"-c", "-l"})),
    "command": Wrapper(plain=frozenset({"-p"}), opaque=frozenset({"-v", "-V"})),
    "time": Wrapper(plain=frozenset({"-p"})),
    "builtin": Wrapper(),
    "stdbuf": Wrapper(valued=frozenset({"-i", "-o", "-e"})),
    "xargs": Wrapper(
        valued=frozenset({"-I", "-n", "-P", "-d", "-L", "-s", "-E", "-a", "--delimiter"}),
        plain=frozenset({"-0", "-r", "-t", "-p", "-x", "--null", "--no-run-if-empty"}),
        judgeable=False,
    ),
    "watch": Wrapper(
        valued=frozenset({"-n", "--interval", "-q"}),
        plain=frozenset({"-d", "-t", "-b", "-e", "-g", "-c", "-x", "-p", "-w", "--differences"}),
        judgeable=False,
    ),
}


def peel(argv: tuple[str, ...], wrapper: Wrapper, *, env: bool) -> tuple[str, ...] | None:
    """The command a wrapper runs; None when its options make it unreadable."""
    index, positional = 1, wrapper.positional
    while index < len(argv):
        word = argv[index]
        if word == "--":
            index += 1
            break
        if word.startswith("-") and len(word) > 1:
            name = word.split("=", 1)[0]
            if name in wrapper.opaque or word[:2] in wrapper.opaque:
                return None
            if name in wrapper.valued and "=" not in word:
                index += 2
            elif (
                name in wrapper.valued
                or name in wrapper.plain
                or word[:2] in wrapper.valued
                or word[1:].isdigit()
                or all(f"-{c}" in wrapper.plain for c in word[1:])
            ):
                index += 1
            else:
                return None
            continue
        if env and "=" in word and not word.startswith("="):
            return None  # env NAME=VALUE: the inner command runs in another environment
        if positional:
            positional -= 1
            index += 1
            continue
        break
    if positional:
        return None
    return argv[index:]


def shell_script(argv: tuple[str, ...]) -> str | None:
    """The script of `sh -c SCRIPT` (also `bash -lc`, `bash -e -c`), or None."""
    for index, word in enumerate(argv[1:], start=1):
        if not word.startswith("-"):
            return None
        if "c" in word[1:] and not word.startswith("--"):
            return argv[index + 1] if index + 1 < len(argv) else None
    return None
