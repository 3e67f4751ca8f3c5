"""Wrappers (`sudo`, `env`, `timeout`, `setsid`, `flock`, ...), shells and builtins that evaluate
text: how to find the command a wrapper runs, and the script `sh -c` runs, so that the policy
judges that.

A wrapper is peeled only when its options are all known (the table, `WRAPPERS`, is at the end of
this module): an unknown option could take the next word as its value, and then what looks like the
inner command is not. `sudo -i`, `env -S`, `command -v` make it unreadable. Assignment words after
`env` or `sudo` (`env -- A=1 rm x`) are peeled too, so the inner command is still judged, and
reported, since they change what runs (`PATH`, `LD_PRELOAD`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

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


# The wrappers the policy can see through, as data: each one's options, so that the words
# after them can be split into the wrapper's own and the command it runs.
#
# A wrapper missing here is judged as a program of its own (its inner command unseen: the tool's
# default decides). An option missing from an entry makes the call unreadable (a card): it may take
# the next word as its value, and then what looks like the inner command is not. Options are
# listed as the programs' manuals give them; long options are matched exactly (an abbreviation
# such as `--us` is unknown, so unreadable).


def _set(words: str) -> frozenset[str]:
    return frozenset(words.split())


@dataclass(frozen=True, slots=True)
class Wrapper:
    """How to find the command a wrapper runs."""

    valued: frozenset[str] = frozenset()
    """Options that take a value (the next word, or after `=`, or attached to a short one)."""
    plain: frozenset[str] = frozenset()
    """Options without a value (short ones may be combined: `-fn`)."""
    opaque: frozenset[str] = frozenset()
    """Options after which the words are no command to judge (`sudo -i`, `command -v`)."""
    script: frozenset[str] = frozenset()
    """Options whose value is a shell script the wrapper runs (`su -c`, `flock -c`)."""
    writes: frozenset[str] = frozenset()
    """Valued options whose value is a file the wrapper writes (`strace -o`)."""
    positional: int = 0
    """Words before the command (`timeout 5`, `chrt 10`, `taskset 0x3`, `chroot /newroot`)."""
    judgeable: bool = True
    """False: the inner command is judged, and the call still needs a card (it runs elsewhere,
    later, as many commands, or with powers its words do not show)."""
    assignments: bool = False
    """NAME=VALUE words before the command set its environment (`env`, `sudo`)."""
    numeric: bool = False
    """`-5` is an option (`nice -5`)."""
    long_any: bool = False
    """Every `--name` or `--name=value` is an option that takes no separate word (valgrind)."""
    permute: bool = False
    """Options may follow other words; the command is only the `script` option's (`su`)."""
    writes_rest: bool = False
    """With `permute`: the other words are files it writes (`script -c CMD FILE`)."""
    command_with: frozenset[str] = frozenset()
    """With `permute` or `joins`: options after which the first other word starts a command, as
    with any wrapper (`runuser -u USER CMD`, `watch -x CMD`)."""
    joins: bool = False
    """Runs its other words joined by spaces as a shell script (`watch 'ls; rm x'`)."""


_SU = Wrapper(
    valued=_set("-g --group -G --supp-group -w --whitelist-environment"),
    plain=_set("- -l --login -m -p --preserve-environment -P --pty -f --fast"),
    opaque=_set("-s --shell -h --help -V --version"),
    script=_set("-c --command --session-command"),
    permute=True,
    judgeable=False,
)

WRAPPERS: dict[str, Wrapper] = {
    "sudo": Wrapper(
        valued=_set(
            "-u --user -g --group -p --prompt -C --close-from -h --host -D --chdir"
            " -T --command-timeout -r --role -t --type -U --other-user"
        ),
        plain=_set(
            "-E -H -n -S -P -k -b -A --preserve-env --set-home --non-interactive --stdin"
            " --preserve-groups --reset-timestamp --background --askpass"
        ),
        opaque=_set(
            "-i -s -e -l -v -K -V -R --login --shell --edit --list --validate"
            " --remove-timestamp --version --chroot --help"
        ),
        assignments=True,
    ),
    "doas": Wrapper(valued=_set("-u -a"), plain=_set("-n"), opaque=_set("-s -C -L")),
    "pkexec": Wrapper(
        valued=_set("--user"),
        plain=_set("--disable-internal-agent --keep-cwd"),
        opaque=_set("--version --help"),
    ),
    "su": _SU,
    "runuser": Wrapper(
        valued=_SU.valued | _set("-u --user"),
        plain=_SU.plain,
        opaque=_SU.opaque,
        script=_SU.script,
        permute=True,
        command_with=_set("-u --user"),
        judgeable=False,
    ),
    "sg": Wrapper(plain=_set("-"), script=_set("-c"), permute=True, judgeable=False),
    "env": Wrapper(
        valued=_set("-u --unset -C --chdir"),
        plain=_set(
            "- -i --ignore-environment -0 --null -v --debug --block-signal --default-signal"
            " --ignore-signal --list-signal-handling"
        ),
        opaque=_set("-S --split-string --help --version"),
        assignments=True,
    ),
    "timeout": Wrapper(
        valued=_set("-s --signal -k --kill-after"),
        plain=_set("--preserve-status --foreground -v --verbose"),
        positional=1,
    ),
    "nice": Wrapper(valued=_set("-n --adjustment"), numeric=True),
    "nohup": Wrapper(),
    "setsid": Wrapper(plain=_set("-c --ctty -f --fork -w --wait")),
    "ionice": Wrapper(
        valued=_set("-c --class -n --classdata"),
        plain=_set("-t --ignore"),
        opaque=_set("-p --pid -P --pgid -u --uid"),
    ),
    "chrt": Wrapper(
        valued=_set("-T --sched-runtime -P --sched-period -D --sched-deadline"),
        plain=_set(
            "-b --batch -d --deadline -e --ext -f --fifo -i --idle -o --other -r --rr"
            " -R --reset-on-fork -v --verbose"
        ),
        opaque=_set("-p --pid -a --all-tasks -m --max"),
        positional=1,
    ),
    "taskset": Wrapper(
        plain=_set("-c --cpu-list"), opaque=_set("-p --pid -a --all-tasks"), positional=1
    ),
    "flock": Wrapper(
        valued=_set("-w --timeout -E --conflict-exit-code"),
        plain=_set(
            "-s --shared -x -e --exclusive -u --unlock -n --nb --nonblock -o --close"
            " -F --no-fork --verbose"
        ),
        script=_set("-c --command"),
        positional=1,
    ),
    "nsenter": Wrapper(
        valued=_set("-t --target -S --setuid -G --setgid"),
        plain=_set(
            "-m --mount -u --uts -i --ipc -n --net -p --pid -U --user -C --cgroup -T --time"
            " -r --root -w --wd -a --all -F --no-fork --preserve-credentials -Z --follow-context"
        ),
        judgeable=False,
    ),
    "unshare": Wrapper(
        valued=_set(
            "-R --root -w --wd -S --setuid -G --setgid --map-user --map-group --setgroups"
            " --propagation --monotonic --boottime"
        ),
        plain=_set(
            "-m --mount -u --uts -i --ipc -n --net -p --pid -U --user -C --cgroup -T --time"
            " -f --fork -r --map-root-user -c --map-current-user --kill-child --mount-proc"
        ),
        judgeable=False,
    ),
    "chroot": Wrapper(
        valued=_set("--userspec --groups"),
        plain=_set("--skip-chdir"),
        positional=1,
        judgeable=False,
    ),
    "strace": Wrapper(
        valued=_set("-o -e -s -u -a -E -I -b -O -P -S -X"),
        plain=_set(
            "-f -ff -F -q -qq -r -t -tt -ttt -T -v -x -xx -y -yy -c -C -w -z -Z -d -D -i -k -n -A"
        ),
        opaque=_set("-p --attach -h -V"),
        writes=_set("-o"),
    ),
    "ltrace": Wrapper(
        valued=_set("-o -e -s -u -a -A -D -F -l -n -w -x"),
        plain=_set("-b -c -C -f -i -r -S -t -tt -ttt -T"),
        opaque=_set("-p -h -V"),
        writes=_set("-o"),
    ),
    "valgrind": Wrapper(
        plain=_set("-q -v -d"),
        opaque=_set("-h --help --version"),
        long_any=True,
        writes=_set("--log-file --xml-file"),
    ),
    "firejail": Wrapper(opaque=_set("--help --version"), long_any=True, judgeable=False),
    "systemd-run": Wrapper(
        valued=_set(
            "-u --unit -p --property --description --slice --uid --gid --nice"
            " --working-directory -E --setenv -H --host -M --machine --on-active --on-boot"
            " --on-startup --on-unit-active --on-unit-inactive --on-calendar --timer-property"
            " --path-property --socket-property"
        ),
        plain=_set(
            "--user --system --scope -r --remain-after-exit --send-sighup -t --pty -P --pipe"
            " -q --quiet -G --collect --wait --no-block --no-ask-password -d --same-dir"
        ),
        opaque=_set("-S --shell -h --help --version"),
        judgeable=False,
    ),
    "script": Wrapper(
        valued=_set(
            "-E --echo -I --log-in -O --log-out -B --log-io -m --logging-format -T --log-timing"
        ),
        plain=_set("-a --append -e --return -f --flush -q --quiet"),
        script=_set("-c --command"),
        permute=True,
        writes_rest=True,
    ),
    "caffeinate": Wrapper(valued=_set("-t"), plain=_set("-d -i -m -s -u"), opaque=_set("-w")),
    "proxychains": Wrapper(valued=_set("-f"), plain=_set("-q")),
    "proxychains4": Wrapper(valued=_set("-f"), plain=_set("-q")),
    "torsocks": Wrapper(
        valued=_set("-u -p -a -P"), plain=_set("-i -d -q"), opaque=_set("--shell -h")
    ),
    "numactl": Wrapper(
        valued=_set(
            "-i --interleave -p --preferred -m --membind -N --cpunodebind -C --physcpubind"
        ),
        plain=_set("-l --localalloc -a --all -t --touch --strict"),
        opaque=_set("-s --show -H --hardware -S --shm -f --file -L --length"),
    ),
    "cgexec": Wrapper(valued=_set("-g"), plain=_set("--sticky")),
    "stdbuf": Wrapper(valued=_set("-i -o -e --input --output --error")),
    "time": Wrapper(
        valued=_set("-f --format -o --output"),
        plain=_set("-p -a --append -v --verbose -q --quiet --portability"),
        writes=_set("-o --output"),
    ),
    "exec": Wrapper(valued=_set("-a"), plain=_set("-c -l")),
    "command": Wrapper(plain=_set("-p"), opaque=_set("-v -V")),
    "builtin": Wrapper(),
    "busybox": Wrapper(opaque=_set("--list --list-full --install --help")),
    "coproc": Wrapper(judgeable=False),
    "xargs": Wrapper(
        valued=_set("-I -n -P -d -L -s -E -a --delimiter --max-args --max-procs --arg-file"),
        plain=_set("-0 -r -t -p -x -o --null --no-run-if-empty --verbose --interactive"),
        judgeable=False,
    ),
    "watch": Wrapper(
        valued=_set("-n --interval -q"),
        plain=_set("-d -t -b -e -g -c -x -p -w --differences --exec --no-title --color"),
        command_with=_set("-x --exec"),
        joins=True,
        judgeable=False,
    ),
}
