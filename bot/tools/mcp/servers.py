"""`McpServers`: every configured MCP server started, and its tools as agent_core `Tool`s.

`check_servers` is the same start-up for `opsgate check`: one line per server.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Collection, Iterator, Mapping
from types import TracebackType

import mcp_types as types

from ._connection import ServerConnection, describe_failure
from .config import McpServerConfig
from .errors import McpConfigError, McpStartError
from .tool import McpAnnotations, McpTool, qualified_name

__all__ = ["McpServers", "check_servers"]

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
    ) -> None:
        """`environ` is where `${VAR}` and the inherited basics come from (default: the
        process environment); `taken` are the names of the other tools, which MCP tools must
        not shadow."""
        env = os.environ if environ is None else environ
        self._connections = {
            name: ServerConnection(name, config, env, backoff=backoff)
            for name, config in configs.items()
        }
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
            self._tools[name] = McpTool(
                server=server,
                tool=tool.name,
                description=tool.description,
                parameters=tool.input_schema,
                annotations=_annotations(tool),
                config=config,
                caller=connection.call,
            )


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


async def check_servers(
    configs: Mapping[str, McpServerConfig], *, environ: Mapping[str, str] | None = None
) -> list[str]:
    """Start each server, list its tools, stop it: one line per server for `opsgate check`,
    "MCP server 'NAME': ok: N tools (a, b)" or why it did not start."""
    env = os.environ if environ is None else environ

    async def one(name: str, config: McpServerConfig) -> str:
        connection = ServerConnection(name, config, env)
        try:
            listing = await connection.start()
        except McpStartError as exc:
            return str(exc)
        except Exception as exc:
            return describe_failure(name, config, exc)
        await connection.aclose()
        names = ", ".join(tool.name for tool in listing)
        return f"MCP server {name!r}: ok: {len(listing)} tools ({names})"

    return list(await asyncio.gather(*(one(n, c) for n, c in configs.items())))
