"""One MCP server's connection: a supervisor task that connects, stays connected while calls
use it, and reconnects with backoff after the server dies or hangs.

A call past `call_timeout` is cancelled (the SDK sends `notifications/cancelled` when it stops
waiting); a server that then does not answer a ping is hung, so it is restarted, as after a
crash. Each call's outcome and each restart are logged and counted (`McpObserver`).

The tools are listed again after each restart and whenever the server says its list changed
(`tool.list_tools`, `ListChanges`); each such listing is handed to `relisted`, where the pins
are checked.

The SDK's client is an anyio context manager that must be entered and left in one task, so each
server gets its own supervisor task (owned here, cancelled on `aclose`); callers in other tasks
only send requests over the open session.

A stdio server starts with its own `env` and the allowlisted basics only. The bot's environment
holds its secrets (SLACK_*, OPENAI_*, OTEL_*, whatever `.env` loaded) and the other servers'
`env`, so a server inherits nothing but the basics of a tool process's environment
(`bot.tools.command`: `PATH`, `HOME`, `LANG`, `LC_*`, `TZ`, `TERM`). The SDK's `stdio_client`
merges its own defaults (`USER`, `LOGNAME`, `SHELL`, …) over the mapping it is given, so the
server is started through `env -u NAME…` for each of those we do not pass: the set is ours, and
tests assert it.

Call outcomes and restarts are reported to an `McpObserver`: `bot.observability.Metrics`
implements it (the method names are the same), so this package never calls prometheus-client
itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta
from typing import Any, Protocol, TextIO, runtime_checkable

import anyio
import httpx2
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.stdio import DEFAULT_INHERITED_ENV_VARS, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from agent_core import ToolError, ToolTimeout
from bot.errors import McpConfigError, McpStartError
from bot.observability.metrics import McpCallOutcome
from bot.policy import McpServerConfig
from bot.words import format_duration

from .command import BASE_NAMES, tool_environment
from .command import expand_variables as expand
from .mcp_tool import ListChanges, list_tools, result_text

__all__ = [
    "ENV_PROGRAM",
    "INHERITED",
    "McpObserver",
    "NoMcpObserver",
    "Relisted",
    "ServerConnection",
    "describe_failure",
    "expand_variables",
    "server_command",
    "server_environment",
]

INHERITED = BASE_NAMES
"""Names copied from the bot's environment when set (and `LC_*`); every other variable stays
behind."""

ENV_PROGRAM = "/usr/bin/env"
"""Starts the server with the SDK's additions unset (names only: no value on a command line)."""


def server_environment(own: Mapping[str, str], parent: Mapping[str, str]) -> dict[str, str]:
    """`own` (already `${VAR}`-expanded) over the inherited basics taken from `parent`."""
    return tool_environment(own, parent)


def server_command(
    command: str, args: Sequence[str], environment: Mapping[str, str]
) -> tuple[str, list[str]]:
    """The program and arguments that start `command args` with exactly `environment`, once the
    SDK has merged its defaults into it. `FileNotFoundError` when `command` is not found (on
    the server's `PATH`), as starting it directly would raise."""
    added = sorted(set(DEFAULT_INHERITED_ENV_VARS) - set(environment))
    if not added:
        return command, list(args)
    found = shutil.which(command, path=environment.get("PATH"))
    if found is None:
        raise FileNotFoundError(command)
    unset = [word for name in added for word in ("-u", name)]
    return ENV_PROGRAM, [*unset, "--", found, *args]


def expand_variables(
    values: Mapping[str, str], environ: Mapping[str, str], *, where: str
) -> dict[str, str]:
    """`values` with every `${VAR}` replaced from `environ`; a missing one is an error naming
    it and `where` (e.g. "mcp_servers.github.headers.Authorization"). Never shows a value."""
    return expand(values, environ, where=where, error=McpConfigError)


@runtime_checkable
class McpObserver(Protocol):
    """Where call outcomes and restarts are counted; `bot.observability.Metrics` is one."""

    def add_mcp_servers(self, names: Iterable[str]) -> None: ...

    def mcp_call(self, server: str, outcome: McpCallOutcome) -> None: ...

    def mcp_restart(self, server: str) -> None: ...


class NoMcpObserver:
    """Counts nothing: `opsgate check`, and tests that do not look."""

    def add_mcp_servers(self, names: Iterable[str]) -> None:
        pass

    def mcp_call(self, server: str, outcome: McpCallOutcome) -> None:
        pass

    def mcp_restart(self, server: str) -> None:
        pass


logger = logging.getLogger("bot.tools.mcp")

Relisted = Callable[[str, list[types.Tool]], Awaitable[None]]
"""Told of a running server's new listing (after a restart, or a change it announced)."""

_STOP_GRACE = 10.0
_PING_TIMEOUT = 5.0
"""At most this long (and at most `call_timeout`) for a ping after a call timed out."""
_CLIENT_INFO = types.Implementation(name="opsgate", version="0.1.0")


class _CallFailed(Exception):
    """A call failed: the message the model reads, and the outcome it is counted as."""

    def __init__(self, outcome: McpCallOutcome, message: str) -> None:
        super().__init__(message)
        self.outcome: McpCallOutcome = outcome


class ServerConnection:
    """The live connection to one server. `start()` connects and lists its tools; `call()`
    sends one `tools/call` and never re-sends it; `aclose()` stops everything it started."""

    def __init__(
        self,
        name: str,
        config: McpServerConfig,
        environ: Mapping[str, str],
        *,
        backoff: tuple[float, float] = (0.5, 30.0),
        observer: McpObserver | None = None,
        relisted: Relisted | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self._environ = environ
        self._backoff = backoff
        self._observer: McpObserver = observer if observer is not None else NoMcpObserver()
        self._client: Client | None = None
        self._ready = asyncio.Event()
        self._broken = asyncio.Event()
        self._stopping = asyncio.Event()
        self._first: asyncio.Future[list[types.Tool]] | None = None
        self._task: asyncio.Task[None] | None = None
        self._last_error = ""
        self._relisted = relisted
        self._changes = ListChanges(name)
        self.starts = 0
        """How many times the server was started (1 + restarts); tests and metrics read it."""

    async def start(self) -> list[types.Tool]:
        """Start the server and list its tools; raise `McpStartError` naming what failed."""
        if self._task is not None:
            raise RuntimeError(f"MCP server {self.name!r} is already started")
        self._first = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._supervise(), name=f"mcp server {self.name}")
        try:
            return await self._first
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Stop the server (stdin closed, then killed if it lingers) and the supervisor."""
        self._stopping.set()
        self._broken.set()
        task, self._task = self._task, None
        if task is None:
            return
        try:
            async with asyncio.timeout(_STOP_GRACE):
                await asyncio.shield(task)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        """One `tools/call`; every failure becomes a `ToolError` the model reads.

        The request is sent at most once: a dead connection answers the call with an error and
        the server is restarted for the *next* call, because the first may have had effects.
        """
        outcome: McpCallOutcome = "error"
        try:
            text = await self._send(tool, arguments)
            outcome = "ok"
            return text
        except _CallFailed as failed:
            outcome = failed.outcome
            if outcome == "timeout":
                raise ToolTimeout(str(failed), self.config.call_timeout.total_seconds()) from None
            raise ToolError(str(failed)) from None
        except asyncio.CancelledError:
            outcome = "cancelled"  # the SDK told the server (notifications/cancelled)
            raise
        finally:
            self._observer.mcp_call(self.name, outcome)

    # --- machinery ---------------------------------------------------------------------------

    async def _send(self, tool: str, arguments: dict[str, Any]) -> str:
        client, broken = await self._connected(tool)
        seconds = self.config.call_timeout.total_seconds()
        where = f"{tool!r} on MCP server {self.name!r}"
        try:
            # The outer guard also covers a write that never completes (the SDK's clock
            # starts after the write).
            async with asyncio.timeout(seconds + 5):
                result = await client.session.call_tool(
                    tool, arguments, read_timeout_seconds=seconds
                )
        except MCPError as exc:
            if exc.code == types.CONNECTION_CLOSED:
                self._restart_after_crash(
                    broken, f"the connection closed during a call of {tool!r}"
                )
                raise _CallFailed(
                    "unavailable",
                    f"MCP server {self.name!r} stopped during the call of {tool!r}, so its "
                    "outcome is unknown; the server is restarted for the next call",
                ) from None
            if exc.code == types.REQUEST_TIMEOUT:
                raise await self._timed_out(client, broken, tool) from None
            raise _CallFailed("error", f"{where} failed: {exc.message}") from None
        except TimeoutError:
            self._restart_after_crash(broken, f"a call of {tool!r} could not be delivered")
            raise _CallFailed(
                "unavailable", f"{where} could not be delivered; the server is restarted"
            ) from None
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._restart_after_crash(broken, f"the connection broke during a call of {tool!r}")
            raise _CallFailed(
                "unavailable", f"MCP server {self.name!r} is not connected; it is restarted"
            ) from None
        except ValidationError as exc:
            raise _CallFailed(
                "error",
                f"{where} returned a malformed result: {exc.error_count()} "
                "problem(s) with its shape",
            ) from None
        text = result_text(result, self.config.output_limit)
        if result.is_error:
            raise _CallFailed("error", text or f"{where} failed without saying why")
        return text

    async def _timed_out(self, client: Client, broken: asyncio.Event, tool: str) -> _CallFailed:
        """The call outlasted `call_timeout` and the SDK has sent `notifications/cancelled`
        for it. A server that still answers a ping keeps running (it may have stopped the
        work); one that does not is hung, and every later call would time out too: restart it.
        """
        waited = format_duration(self.config.call_timeout)
        where = f"{tool!r} on MCP server {self.name!r}"
        logger.warning(
            "MCP server %r: %r did not answer within %s; the call is cancelled",
            self.name,
            tool,
            waited,
        )
        ping = timedelta(seconds=min(_PING_TIMEOUT, self.config.call_timeout.total_seconds()))
        if not await _answers_ping(client, ping):
            why = f"no answer to a ping within {format_duration(ping)} after {tool!r} timed out"
            self._restart_after_crash(broken, why)
            return _CallFailed(
                "timeout",
                f"{where} did not answer within {waited} and was cancelled; the server no "
                "longer answers, so it is restarted for the next call",
            )
        return _CallFailed("timeout", f"{where} did not answer within {waited} and was cancelled")

    async def _connected(self, tool: str) -> tuple[Client, asyncio.Event]:
        """The open client and the event that ends *its* connection (so a late failure of an
        old connection cannot restart the new one)."""
        if self._stopping.is_set():
            raise _CallFailed("unavailable", f"MCP server {self.name!r} is shut down")
        if self._client is None:
            try:
                async with asyncio.timeout(self.config.timeout.total_seconds()):
                    await self._ready.wait()
            except TimeoutError:
                pass
        client = self._client
        if client is None:
            raise _CallFailed(
                "unavailable",
                f"MCP server {self.name!r} is not running, so {tool!r} was not called "
                f"({self._last_error or 'it is starting'}); it is being restarted",
            )
        return client, self._broken

    def _restart_after_crash(self, broken: asyncio.Event, why: str) -> None:
        if not broken.is_set():
            self._last_error = why
            logger.warning("MCP server %r: %s; restarting it", self.name, why)
            self._observer.mcp_restart(self.name)
            self._ready.clear()
            self._client = None
            broken.set()

    async def _supervise(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            self._broken = asyncio.Event()
            if self._stopping.is_set():
                break
            try:
                await self._serve_once()
                failures = 0
            except Exception as exc:
                line = describe_failure(self.name, self.config, exc)
                first = self._first
                if first is not None and not first.done():
                    first.set_exception(McpStartError(line))
                    return
                failures += 1
                self._last_error = line
                logger.warning("restarting MCP server failed: %s", line)
            if self._stopping.is_set():
                break
            base, ceiling = self._backoff
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(ceiling, base * 2**failures)):
                    await self._stopping.wait()  # backoff, cut short by aclose()

    async def _serve_once(self) -> None:
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
            try:
                async with self._session(errlog) as client:
                    async with asyncio.timeout(self.config.timeout.total_seconds()):
                        await client.__aenter__()
                        tools = await list_tools(client)
                    self.starts += 1
                    self._client = client
                    self._ready.set()
                    if self._first is not None and not self._first.done():
                        self._first.set_result(tools)
                    else:
                        await self._hand_on(tools)  # a restarted server may list others
                    watcher = self._watch(client)
                    try:
                        await self._broken.wait()
                    finally:
                        await ListChanges.stop(watcher)
            except Exception as exc:
                errlog.seek(0)
                raise _Failed(exc, errlog.read()[-400:].strip()) from exc
            finally:
                self._ready.clear()
                self._client = None

    def _watch(self, client: Client) -> asyncio.Task[None] | None:
        """While connected: list again each time the server says its tools changed."""
        if self._relisted is None:
            return None

        async def watch() -> None:
            listening = asyncio.create_task(self._changes.listen(client))
            try:
                while True:
                    await self._hand_on(await self._changes.relist(client))
            except Exception as exc:  # a dead server is noticed and restarted by its calls
                logger.warning("MCP server %r: listing its tools again failed: %s", self.name, exc)
            finally:
                await ListChanges.stop(listening)

        return asyncio.create_task(watch(), name=f"mcp tool changes {self.name}")

    async def _hand_on(self, tools: list[types.Tool]) -> None:
        if self._relisted is None:
            return
        try:
            await self._relisted(self.name, tools)
        except Exception:
            logger.exception("MCP server %r: checking its new tool listing failed", self.name)

    @asynccontextmanager
    async def _session(self, errlog: TextIO) -> AsyncIterator[Client]:
        """A `Client` not yet entered (its handshake runs under the start timeout); left here."""
        async with AsyncExitStack() as stack:
            where = f"mcp_servers.{self.name}"
            if self.config.command is not None:
                env = expand_variables(self.config.env, self._environ, where=f"{where}.env")
                environment = server_environment(env, self._environ)
                program, args = server_command(self.config.command, self.config.args, environment)
                params = StdioServerParameters(command=program, args=args, env=environment)
                client = Client(
                    stdio_client(params, errlog=errlog),
                    cache=None,
                    client_info=_CLIENT_INFO,
                    message_handler=self._changes.message_handler,
                )
            else:
                assert self.config.url is not None
                headers = expand_variables(
                    self.config.headers, self._environ, where=f"{where}.headers"
                )
                http = await stack.enter_async_context(
                    httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300))
                )
                client = Client(
                    streamable_http_client(self.config.url, http_client=http),
                    cache=None,
                    client_info=_CLIENT_INFO,
                    message_handler=self._changes.message_handler,
                )
            stack.push_async_exit(client.__aexit__)
            yield client


class _Failed(Exception):
    """A connection attempt failed; carries the server's last stderr lines for the message."""

    def __init__(self, cause: Exception, stderr: str) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.stderr = stderr


async def _answers_ping(client: Client, within: timedelta) -> bool:
    """Whether the server answers a `ping` in time. Any answer counts, an error too: servers
    on protocol 2026-07-28, which dropped `ping`, answer "Method not found"."""
    try:
        async with asyncio.timeout(within.total_seconds()):
            await client.session.send_ping()
    except MCPError as exc:
        return exc.code != types.CONNECTION_CLOSED
    except (TimeoutError, anyio.ClosedResourceError, anyio.BrokenResourceError):
        return False
    return True


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, _Failed):
        return _leaves(exc.cause)
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def describe_failure(name: str, config: McpServerConfig, exc: BaseException) -> str:
    """One line saying why server `name` did not start: for logs and `opsgate check`."""
    stderr = exc.stderr if isinstance(exc, _Failed) else ""
    tail = f" (stderr: {stderr.splitlines()[-1]})" if stderr else ""
    leaves = _leaves(exc)
    for leaf in leaves:
        if isinstance(leaf, McpConfigError):
            return str(leaf)
    for leaf in leaves:
        if isinstance(leaf, FileNotFoundError) and config.command is not None:
            return f"MCP server {name!r}: command {config.command!r} not found"
        if isinstance(leaf, PermissionError) and config.command is not None:
            return f"MCP server {name!r}: command {config.command!r} cannot be run ({leaf})"
        if isinstance(leaf, httpx2.TransportError | OSError) and config.url is not None:
            return f"MCP server {name!r}: cannot reach {config.url}: {leaf or type(leaf).__name__}"
        if isinstance(leaf, TimeoutError):
            return (
                f"MCP server {name!r}: no handshake within {format_duration(config.timeout)}" + tail
            )
        if isinstance(leaf, MCPError):
            return f"MCP server {name!r}: handshake failed: {leaf.message}{tail}"
    first = leaves[0] if leaves else exc
    return f"MCP server {name!r}: handshake failed: {type(first).__name__}: {first}{tail}"
