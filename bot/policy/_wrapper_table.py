"""The wrappers the policy can see through, as data: each one's options, so that the words
after them can be split into the wrapper's own and the command it runs.

A wrapper missing here is judged as a program of its own (its inner command unseen: the tool's
default decides). An option missing from an entry makes the call unreadable (a card): it may take
the next word as its value, and then what looks like the inner command is not. Options are
listed as the programs' manuals give them; long options are matched exactly (an abbreviation
such as `--us` is unknown, so unreadable).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WRAPPERS", "Wrapper"]


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
