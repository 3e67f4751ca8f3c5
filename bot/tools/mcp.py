"""MCP tool servers from the policy file's `[mcp_servers.NAME]` (`bot.policy`, which also gates
each call), offered as `NAME__TOOL` tools and kept connected: `McpServers`, every configured
server started, and its tools as agent_core `Tool`s. A server's connection is
`_mcp_connection.py`; a tool's definition, call and pin check are `mcp_tool.py`.

`check_servers` is the same start-up for `opsgate check`: one line per server.

A running server's later listings (after a restart, or when it says its tools changed) are
handed to `relisted` as fresh `McpTool`s, for the pin check; the tools offered to the model
stay those of start-up, so a tool added later is not offered until the next start.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

import mcp_types as types

from bot.errors import McpConfigError, McpServerError, McpStartError
from bot.policy import McpServerConfig, qualified_name

from ._mcp_connection import (
    INHERITED,
    McpObserver,
    NoMcpObserver,
    ServerConnection,
    describe_failure,
    expand_variables,
    server_environment,
)
from .mcp_tool import McpAnnotations, McpTool

__all__ = [
    "INHERITED",
    "McpAnnotations",
    "McpConfigError",
    "McpObserver",
    "McpServerError",
    "McpServers",
    "McpStartError",
    "McpTool",
    "NoMcpObserver",
    "Relisted",
    "ServerCheck",
    "check_servers",
    "expand_variables",
    "server_environment",
    "start_mcp_servers",
]

Relisted = Callable[[str, tuple[McpTool, ...]], Awaitable[None]]
"""Told of a running server's new listing: its name and the tools it lists now."""

_OPENAI_TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


class McpServers:
    """Owns one connection (and its supervisor task) per server; `async with` starts them all
    and leaves with every server stopped. Start-up fails as a whole, naming each server that
    did not start, so the bot never runs with half its policy."""

    def __init__(
        self,
        configs: Mapping[str, McpServerConfig],
        *,
        environ: Mapping[str, str] | None = None,
        taken: Collection[str] = (),
        backoff: tuple[float, float] = (0.5, 30.0),
        observer: McpObserver | None = None,
        relisted: Relisted | None = None,
    ) -> None:
        """`environ` is where `${VAR}` and the inherited basics come from (default: the
        process environment); `taken` are the names of the other tools, which MCP tools must
        not shadow; `observer` counts each server's calls and restarts; `relisted` hears of
        each later listing."""
        env = os.environ if environ is None else environ
        self._relisted = relisted
        self._connections = {
            name: ServerConnection(
                name,
                config,
                env,
                backoff=backoff,
                observer=observer,
                relisted=self._listed_again if relisted is not None else None,
            )
            for name, config in configs.items()
        }
        if observer is not None:
            observer.add_mcp_servers(configs)
        self._taken = frozenset(taken)
        self._tools: dict[str, McpTool] = {}

    async def __aenter__(self) -> McpServers:
        results = await asyncio.gather(
            *(c.start() for c in self._connections.values()), return_exceptions=True
        )
        failures = [str(r) for r in results if isinstance(r, BaseException)]
        try:
            if failures:
                raise McpStartError("; ".join(failures))
            for connection, listing in zip(self._connections.values(), results, strict=True):
                assert not isinstance(listing, BaseException)
                self._add(connection, listing)
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await asyncio.gather(*(c.aclose() for c in self._connections.values()))

    @property
    def tools(self) -> tuple[McpTool, ...]:
        """Every server's tools, in the servers' order, then each server's listing order."""
        return tuple(self._tools.values())

    def __iter__(self) -> Iterator[McpTool]:
        return iter(self._tools.values())

    def tool(self, name: str) -> McpTool:
        """The tool offered as `name` (`NAME__TOOL`); KeyError when there is none."""
        return self._tools[name]

    def connection(self, server: str) -> ServerConnection:
        return self._connections[server]

    def _add(self, connection: ServerConnection, listing: list[types.Tool]) -> None:
        server, config = connection.name, connection.config
        listed = {tool.name for tool in listing}
        unknown = sorted(set(config.tools) - listed)
        if unknown:
            raise McpConfigError(
                f"mcp_servers.{server}.tools names {', '.join(map(repr, unknown))}, but the "
                f"server does not list such a tool; it lists: {', '.join(sorted(listed)) or 'none'}"
            )
        for tool in listing:
            name = qualified_name(server, tool.name)
            if not _OPENAI_TOOL_NAME.fullmatch(name):
                raise McpConfigError(
                    f"MCP server {server!r} tool {tool.name!r} would be offered as {name!r}, "
                    "which is not a valid tool name (at most 64 letters, digits, '_' or '-'); "
                    "rename the server in the policy file or leave the tool out"
                )
            if name in self._tools or name in self._taken:
                raise McpConfigError(
                    f"MCP server {server!r} tool {tool.name!r} would be offered as {name!r}, "
                    "which another tool already is"
                )
            self._tools[name] = _tool(connection, tool)

    async def _listed_again(self, server: str, listing: list[types.Tool]) -> None:
        if self._relisted is not None:
            connection = self._connections[server]
            await self._relisted(server, tuple(_tool(connection, tool) for tool in listing))


def _tool(connection: ServerConnection, tool: types.Tool) -> McpTool:
    return McpTool(
        server=connection.name,
        tool=tool.name,
        description=tool.description,
        parameters=tool.input_schema,
        annotations=_annotations(tool),
        config=connection.config,
        caller=connection.call,
    )


async def start_mcp_servers(
    stack: AsyncExitStack,
    configs: Mapping[str, McpServerConfig],
    *,
    taken: Collection[str],
    observer: McpObserver | None = None,
    relisted: Relisted | None = None,
) -> tuple[McpTool, ...]:
    """Start every server (none configured: nothing starts) and leave them to `stack` to
    stop; their tools, for the bot's tool set. `relisted` hears of later listings."""
    if not configs:
        return ()
    servers = await stack.enter_async_context(
        McpServers(configs, taken=taken, observer=observer, relisted=relisted)
    )
    return servers.tools


def _annotations(tool: types.Tool) -> McpAnnotations:
    hints = tool.annotations
    title = tool.title or (hints.title if hints else None)
    if hints is None:
        return McpAnnotations(title=title)
    return McpAnnotations(
        title=title,
        read_only=hints.read_only_hint,
        destructive=hints.destructive_hint,
        idempotent=hints.idempotent_hint,
        open_world=hints.open_world_hint,
    )


@dataclass(frozen=True)
class ServerCheck:
    """What `opsgate check` found about one server: `line` says it in words."""

    kind: Literal["ok", "failed"]
    server: str
    line: str
    tools: tuple[str, ...] = ()
    """The names offered to the model (`NAME__TOOL`), when it started."""


async def check_servers(
    configs: Mapping[str, McpServerConfig],
    *,
    environ: Mapping[str, str] | None = None,
    taken: Collection[str] = (),
) -> list[ServerCheck]:
    """Start each server, list its tools, stop it: one result per server for `opsgate check`,
    "MCP server 'NAME': ok: N tools (a, b)" or why it would stop start-up (the same checks as
    start-up: tool names, overrides naming listed tools, clashes with `taken`)."""

    async def one(name: str, config: McpServerConfig) -> ServerCheck:
        try:
            async with McpServers({name: config}, environ=environ, taken=taken) as started:
                listed = started.tools
        except McpServerError as exc:
            return ServerCheck("failed", name, str(exc))
        except Exception as exc:
            return ServerCheck("failed", name, describe_failure(name, config, exc))
        names = ", ".join(tool.tool for tool in listed)
        line = f"MCP server {name!r}: ok: {len(listed)} tools ({names})"
        return ServerCheck("ok", name, line, tuple(tool.name for tool in listed))

    return list(await asyncio.gather(*(one(n, c) for n, c in configs.items())))
