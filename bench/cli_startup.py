"""CLI start-up: `python bench/cli_startup.py` (a few seconds).

The CPU time of `opsgate --help` and of each command's `--help`, as child processes, beside the
floor of a bare `python -c pass` measured in the same run. Each command imports only what it
uses once it is chosen, so `--help` should cost a little more than the interpreter itself; a
command whose `--help` costs seconds has started importing the bot (Slack's SDK, MCP, the
policy's parser) at parse time.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import resource
import statistics
import subprocess
from collections.abc import Sequence

from _common import Table, machine, ms, ratio

OPSGATE = Path(sys.executable).with_name("opsgate")
ROUNDS = 7
COMMANDS: tuple[tuple[str, ...], ...] = (
    ("--help",),
    ("run", "--help"),
    ("check", "--help"),
    ("audit", "--help"),
    ("policy", "explain", "--help"),
    ("chat", "--help"),
)


def cpu_of(argv: Sequence[str]) -> float:
    """User + system CPU seconds of one child process run to its end."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    print(machine())
    floor = statistics.median(cpu_of([sys.executable, "-c", "pass"]) for _ in range(ROUNDS))
    table = Table("command", "CPU (median)", "vs bare python")
    table.add("python -c pass", ms(floor), "1.00x")
    worst = 0.0
    for command in COMMANDS:
        cpu = statistics.median(cpu_of([str(OPSGATE), *command]) for _ in range(ROUNDS))
        worst = max(worst, cpu)
        table.add("opsgate " + " ".join(command), ms(cpu), ratio(cpu, floor))
    table.print()
    print(f"slowest --help: {ms(worst)} of CPU (goal: at most 300 ms)")


if __name__ == "__main__":
    main()
