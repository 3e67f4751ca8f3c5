"""A private PostgreSQL cluster for the tests: started once per test session, a database per test.

The server binaries come from the machine (`/usr/lib/postgresql/<major>/bin`, which `.ci/run`
installs); without them the fixtures skip, and only then. `initdb` refuses to run as root, so
when the tests run as root the server runs as the `postgres` OS user. The cluster listens on a
free loopback port with trust authentication, keeps its socket in its own temporary directory,
and is stopped and removed when the session ends.

Use the fixtures by importing them into a test module (or a conftest):
`from tests.support.postgres import postgres_cluster, postgres_url`.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import TracebackType

import asyncpg
import pytest

__all__ = ["PostgresCluster", "find_bin_dir", "postgres_cluster", "postgres_url"]

_SERVER_USER = "postgres"


def find_bin_dir() -> Path | None:
    """The newest installed server's bin directory, or None when no server is installed."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    return found[-1].parent if found else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresCluster:
    """One throwaway server; a context manager (entering starts it, leaving removes it)."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.port = 0
        self._root: Path | None = None
        self._as_user: list[str] = []

    @property
    def root(self) -> Path:
        if self._root is None:
            raise RuntimeError("the PostgreSQL cluster is not started")
        return self._root

    @property
    def admin_url(self) -> str:
        """The maintenance database, for creating and dropping the tests' databases."""
        return self.url("postgres")

    def url(self, database: str) -> str:
        return f"postgresql://{_SERVER_USER}@127.0.0.1:{self.port}/{database}"

    def __enter__(self) -> PostgresCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self, *args: str) -> None:
        command = [*self._as_user, *args]
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
        if done.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(
                f"{Path(args[0]).name!r} failed ({done.returncode}): "
                f"{done.stdout}{done.stderr}{tail}"
            )

    def start(self) -> None:
        self._root = Path(tempfile.mkdtemp(prefix="opsgate-pg-"))
        if os.geteuid() == 0:
            # initdb refuses root: the server runs as the `postgres` user, who owns the dir.
            user = pwd.getpwnam(_SERVER_USER)
            os.chown(self._root, user.pw_uid, user.pw_gid)
            self._as_user = ["runuser", "-u", _SERVER_USER, "--"]
        data = self.root / "data"
        self._run(
            str(self.bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            _SERVER_USER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )
        for attempt in range(5):
            self.port = _free_port()
            options = (
                f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                "-c max_connections=200"
            )
            try:
                self._run(
                    str(self.bin_dir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-l",
                    str(self.root / "server.log"),
                    "-o",
                    options,
                    "-w",
                    "-t",
                    "60",
                    "start",
                )
                return
            except RuntimeError:
                if attempt == 4:  # the port may have been taken between the probe and the bind
                    self.stop()
                    raise

    def stop(self) -> None:
        root, self._root = self._root, None
        if root is None:
            return
        data = root / "data"
        if (data / "postmaster.pid").exists():
            subprocess.run(
                [
                    *self._as_user,
                    str(self.bin_dir / "pg_ctl"),
                    "-D",
                    str(data),
                    "-m",
                    "immediate",
                    "-w",
                    "stop",
                ],
                capture_output=True,
                check=False,
                timeout=60,
            )
        shutil.rmtree(root, ignore_errors=True)

    async def create_database(self) -> str:
        """A fresh empty database; returns its URL."""
        name = f"t_{secrets.token_hex(6)}"
        conn = await asyncpg.connect(self.admin_url)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        return self.url(name)

    async def drop_database(self, url: str) -> None:
        name = url.rsplit("/", 1)[-1]
        conn = await asyncpg.connect(self.admin_url)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """The session's cluster; skips only when no PostgreSQL server is installed."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.skip("PostgreSQL server binaries not installed (/usr/lib/postgresql/*/bin)")
    with PostgresCluster(bin_dir) as cluster:
        yield cluster


@pytest.fixture
async def postgres_url(postgres_cluster: PostgresCluster) -> AsyncIterator[str]:
    """A database of its own for one test, dropped afterwards."""
    url = await postgres_cluster.create_database()
    try:
        yield url
    finally:
        with contextlib.suppress(Exception):  # the cluster goes away at the end anyway
            await postgres_cluster.drop_database(url)
