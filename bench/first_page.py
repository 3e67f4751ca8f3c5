"""First page: `python bench/first_page.py` (about 30-60 s).

How long a newcomer waits, once the install has finished, between `opsgate run` with an empty
environment (no Slack tokens, no model: the local workspace) and the page with its first state
in their browser: a fresh directory each time (so a new database, migrated from nothing), the
child started, `/` and `/workspace/state` fetched as soon as it prints its line.

The floor, measured in the same run: a child that only imports what `opsgate run` imports
(`bot.server`, `bot.workspace`), so the figure beside it is what start-up itself adds.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import os
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request

from bench._common import REPO, machine

ROUNDS = 5
OPSGATE = Path(sys.executable).with_name("opsgate")
GOAL = 10.0


def _environment(port: int) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(REPO),
        "OPSGATE_PORT": str(port),
    }


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def first_page() -> float:
    """Seconds from the start of `opsgate run` to the page and its state in hand."""
    port = _port()
    with tempfile.TemporaryDirectory() as directory:
        began = time.monotonic()
        child = subprocess.Popen(
            [str(OPSGATE), "run"],
            cwd=directory,
            env=_environment(port),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert child.stdout is not None
            line = child.stdout.readline()
            assert "local workspace" in line, line
            base = f"http://127.0.0.1:{port}"
            urllib.request.urlopen(f"{base}/").read()
            urllib.request.urlopen(f"{base}/workspace/state?user=U0RILEY&after=0").read()
            return time.monotonic() - began
        finally:
            child.terminate()
            child.wait(timeout=60)


def imports_only() -> float:
    began = time.monotonic()
    subprocess.run(
        [sys.executable, "-c", "import bot.server, bot.workspace"],
        env=_environment(0),
        check=True,
    )
    return time.monotonic() - began


def main() -> int:
    print(machine())
    pages, floors = [], []
    for _ in range(ROUNDS):  # alternating, so both sides see the same load
        floors.append(imports_only())
        pages.append(first_page())
    page, floor = statistics.median(pages), statistics.median(floors)
    print(f"first page after `opsgate run` (median of {ROUNDS}): {page:.2f} s")
    print(f"  floor, the imports alone: {floor:.2f} s; start-up adds {page - floor:.2f} s")
    print(f"  every round: {', '.join(f'{p:.2f}' for p in pages)} s")
    verdict = "ok" if page < GOAL else "OVER"
    print(f"check: under {GOAL:.0f} s: {verdict}")
    return 0 if page < GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
