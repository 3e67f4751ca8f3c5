"""One MCP server tool as an agent_core `Tool`, with what the approval card shows about it.

Whether a call waits is the policy's to say (`bot.policy.mcp_approval`, by the tool's
`[mcp_servers.NAME.tools.TOOL]` override, its server's `approval` and its annotations): the tool
carries its server's section (`server_config`) for the policy to read.

A server's tool list while it runs: listing it (`list_tools`), and hearing that it changed
(`ListChanges`). A server may change its tools without restarting. It says so with
`notifications/tools/list_changed` on the handshake protocols, or with the tools event on a
`subscriptions/listen` stream on 2026-07-28, which the client must open. `ListChanges` hears
both and sets one event; the connection then lists again and hands the new listing on, so the
same pin check as at start-up runs on it (a changed definition is quarantined at once).

A `tools/call` result is the text the model reads (`result_text`): text joined, structured
content as JSON, other content named, and the whole capped (head and tail kept, the cut
counted).

A server tool's definition as it was reviewed: what is pinned, its digest, and how a later
listing differs, field by field.

The definition is what the policy and the model rely on: the tool's name, its description, its
input schema and its annotations (`readOnlyHint` decides a call under `approval =
"annotations"`). The digest is SHA-256 over its canonical JSON, so any change in any field
changes it. The store keeps the pins (`bot.store.mcp_pins`); a tool whose listing differs from
its pin is quarantined (`McpTool.quarantined`) until an MCP admin accepts the new definition.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import mcp_types as types
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.client.subscriptions import ListenNotSupportedError

from bot.policy import McpServerConfig, mcp_approval, mcp_requires_approval, qualified_name

__all__ = [
    "ListChanges",
    "McpAnnotations",
    "McpTool",
    "ToolDefinition",
    "cap",
    "changed_fields",
    "definition_of",
    "list_tools",
    "result_text",
]


@dataclass(frozen=True)
class McpAnnotations:
    """The server's hints about a tool, as listed (None: the server did not say)."""

    title: str | None = None
    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None
    open_world: bool | None = None

    @property
    def may_destroy(self) -> bool:
        """MCP's defaults: a tool not marked read-only is destructive unless it says it is not."""
        return self.read_only is not True and self.destructive is not False

    def labels(self) -> tuple[str, ...]:
        """Short words for the approval card, e.g. ("destructive", "open world")."""
        if self.read_only is True:
            labels = ["read-only"]
        elif self.destructive is True:
            labels = ["destructive"]
        elif self.destructive is False:
            labels = ["not destructive"]
        else:
            labels = ["may be destructive (not annotated)"]
        if self.idempotent is True and self.read_only is not True:
            labels.append("idempotent")
        if self.open_world is True:
            labels.append("open world")
        return tuple(labels)


Caller = Callable[[str, dict[str, Any]], Awaitable[str]]
"""Sends one `tools/call` to the tool's server and returns the result text (or raises)."""


class McpTool:
    """An MCP server's tool offered to the model as `NAME__TOOL`, schema passed through."""

    def __init__(
        self,
        *,
        server: str,
        tool: str,
        description: str | None,
        parameters: dict[str, Any],
        annotations: McpAnnotations,
        config: McpServerConfig,
        caller: Caller,
    ) -> None:
        self.server = server
        self.tool = tool
        self.annotations = annotations
        self._name = qualified_name(server, tool)
        self._description = description if description is not None else (annotations.title or tool)
        self._parameters = parameters
        self._config = config
        self._caller = caller
        self.quarantined = False
        """Its listing differs from the pinned definition (below): every call waits."""

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return self._description

    @property
    def parameters(self) -> dict[str, Any]:
        return self._parameters

    @property
    def title(self) -> str:
        """What the card calls the tool: its title, else its own name."""
        return self.annotations.title or self.tool

    @property
    def server_config(self) -> McpServerConfig:
        """Its server's `[mcp_servers.NAME]` section, which decides when its calls wait."""
        return self._config

    def requires_approval(self) -> bool:
        """Without arguments: True unless no call of this tool can ever wait."""
        return mcp_requires_approval(self)

    def needs_approval(self, arguments: Mapping[str, Any]) -> bool:
        return mcp_approval(self, arguments).required

    async def invoke(self, arguments: dict[str, Any]) -> str:
        """Send exactly one `tools/call`; a failure raises `ToolError` for the model to read."""
        return await self._caller(self.tool, arguments)

    def __repr__(self) -> str:
        return f"McpTool({self._name!r})"


def cap(text: str, limit: int) -> str:
    """Keep the head and the tail of `text` within `limit` characters and say what was cut."""
    if len(text) <= limit:
        return text
    head = limit - limit // 2
    tail = limit // 2
    cut = len(text) - head - tail
    return (
        f"{text[:head]}\n[... {cut} characters cut ...]\n{text[len(text) - tail :] if tail else ''}"
    )


def _block_text(block: Any) -> str:
    match block:
        case types.TextContent(text=text):
            return str(text)
        case types.ImageContent(mime_type=mime):
            return f"[image content ({mime}) not shown]"
        case types.AudioContent(mime_type=mime):
            return f"[audio content ({mime}) not shown]"
        case types.ResourceLink(uri=uri):
            return f"[resource link: {uri}]"
        case types.EmbeddedResource(resource=types.TextResourceContents(uri=uri, text=text)):
            return f"[resource {uri}]\n{text}"
        case types.EmbeddedResource(resource=resource):
            return f"[binary resource {getattr(resource, 'uri', '')} not shown]"
        case _:
            return f"[{getattr(block, 'type', type(block).__name__)} content not shown]"


def _same_json(text: str, value: Any) -> bool:
    try:
        return bool(json.loads(text) == value)
    except ValueError:
        return False


def _already_said(parts: list[str], structured: Any) -> bool:
    """Servers usually send structured content twice: also as a JSON text block, or (SDK
    servers returning a plain value) as the text of `{"result": value}`."""
    if any(_same_json(p, structured) for p in parts):
        return True
    if isinstance(structured, dict) and set(structured) == {"result"}:
        value = structured["result"]
        return "\n".join(parts) == (value if isinstance(value, str) else json.dumps(value))
    return False


def result_text(result: types.CallToolResult, limit: int) -> str:
    """The model-facing text of `result` (the caller looks at `is_error` itself)."""
    parts = [_block_text(block) for block in result.content]
    structured = result.structured_content
    if structured is not None and not _already_said(parts, structured):
        parts.append(json.dumps(structured, ensure_ascii=False, default=str))
    return cap("\n".join(parts), limit)


logger = logging.getLogger("bot.tools.mcp")

_PAGE_CAP = 100


async def list_tools(client: Client) -> list[types.Tool]:
    """Every tool the server lists, following its pages (at most `_PAGE_CAP`)."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(_PAGE_CAP):
        page = await client.session.list_tools(
            params=types.PaginatedRequestParams(cursor=cursor) if cursor else None
        )
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


class ListChanges:
    """Hears that one server's tool list changed; `changed` is set until it is listed again."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.changed = asyncio.Event()

    async def message_handler(self, message: IncomingMessage) -> None:
        """The SDK client's `message_handler`: the notification of the handshake protocols."""
        if isinstance(message, types.ToolListChangedNotification):
            self.changed.set()

    async def listen(self, client: Client) -> None:
        """Hold a `subscriptions/listen` stream for tool changes while connected (2026-07-28;
        on older protocols the notification above is enough). Ends quietly when the server
        does not offer it or the stream drops: a restart lists the tools again anyway."""
        try:
            async with client.listen(tools_list_changed=True) as stream:
                if not stream.honored.tools_list_changed:
                    return
                async for _ in stream:
                    self.changed.set()
        except ListenNotSupportedError:
            return
        except Exception as exc:  # the connection's own supervision notices a dead server
            logger.info("MCP server %r: no longer hearing of tool changes: %s", self.server, exc)

    async def relist(self, client: Client) -> list[types.Tool]:
        """Wait for a change, then list the tools again."""
        await self.changed.wait()
        self.changed.clear()
        return await list_tools(client)

    @staticmethod
    async def stop(task: asyncio.Task[None] | None) -> None:
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


_FIELDS = ("name", "description", "input_schema", "annotations")


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any]

    def canonical(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()

    @classmethod
    def from_json(cls, text: str) -> ToolDefinition:
        data = json.loads(text)
        return cls(**{key: data[key] for key in _FIELDS})


def definition_of(tool: McpTool) -> ToolDefinition:
    """The definition the server listed for `tool` (its own name, not `NAME__TOOL`)."""
    hints = {k: v for k, v in asdict(tool.annotations).items() if v is not None}
    return ToolDefinition(tool.tool, tool.description, dict(tool.parameters), hints)


def changed_fields(old: ToolDefinition, new: ToolDefinition) -> dict[str, dict[str, Any]]:
    """Each field that differs, with its pinned and its listed value (`before`, `after`)."""
    before, after = asdict(old), asdict(new)
    return {
        key: {"before": before[key], "after": after[key]}
        for key in _FIELDS
        if before[key] != after[key]
    }
