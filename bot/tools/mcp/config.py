"""`[mcp_servers.NAME]` in the policy file: how to reach one MCP server and when its calls wait.

Validated strictly (`extra="forbid"`), like the rest of the policy: a typo in a safety setting
must stop the bot at start-up rather than quietly fall back to a default.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    model_validator,
)

from bot.argument_rule import ArgumentRule
from bot.preview_args import PreviewArgs, check_tool_preview
from bot.words import parse_duration

from ..environment import expand_variables as expand
from .errors import McpConfigError

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_OUTPUT_LIMIT",
    "DEFAULT_START_TIMEOUT",
    "McpApprovalMode",
    "McpServerConfig",
    "McpServerName",
    "McpToolOverride",
    "expand_variables",
]

DEFAULT_START_TIMEOUT = timedelta(seconds=30)
"""How long a server has to start and answer the handshake and `tools/list`."""
DEFAULT_CALL_TIMEOUT = timedelta(seconds=60)
"""How long one tool call may take before it is answered with an error."""
DEFAULT_OUTPUT_LIMIT = 20_000
"""Characters of a tool result kept (head and tail; the middle is cut)."""

McpApprovalMode = Literal["annotations", "always", "never"]
"""`annotations`: a tool annotated `readOnlyHint: true` runs freely, any other waits."""

_SERVER_NAME = re.compile(r"[A-Za-z0-9-]+(?:_[A-Za-z0-9-]+)*")


def _server_name(value: str) -> str:
    if not _SERVER_NAME.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a usable MCP server name: use letters, digits, '-' and single "
            "'_' between them (tools are offered as NAME__TOOL, so '__' cannot be in NAME)"
        )
    return value


McpServerName = Annotated[StrictStr, AfterValidator(_server_name)]
"""A `[mcp_servers.NAME]` key; the policy model uses `dict[McpServerName, McpServerConfig]`."""


def _duration(value: Any) -> Any:
    if isinstance(value, timedelta):
        return value
    if not isinstance(value, str):
        raise ValueError(f'durations are written as text, like "30s" or "2m", not {value!r}')
    parsed = parse_duration(value)
    if parsed <= timedelta(0):
        raise ValueError(f"{value!r} is zero; a duration must be longer than that")
    return parsed


Duration = Annotated[timedelta, BeforeValidator(_duration)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class McpToolOverride(_Model):
    """`[mcp_servers.NAME.tools.TOOL]`: one tool's approval instead of the server's.

    `approval = "rules"` asks only when one of `rules` matches, as for the built-in tools.
    `preview` names a read-only tool of the same server called before the card is posted
    (with `preview_args`, filled from the call's arguments), its output on the card and bound
    to Approve.
    """

    approval: McpApprovalMode | Literal["rules"] | None = None
    rules: tuple[ArgumentRule, ...] = ()
    preview: Annotated[StrictStr, Field(min_length=1)] | None = None
    preview_args: PreviewArgs | None = None
    preview_ttl: Duration | None = None

    @model_validator(mode="after")
    def _rules_fit_approval(self) -> McpToolOverride:
        if self.approval == "rules" and not self.rules:
            raise ValueError('approval = "rules" needs at least one [[...tools.TOOL.rules]] entry')
        if self.approval != "rules" and self.rules:
            raise ValueError(
                f'rules are only used with approval = "rules", but approval is {self.approval!r}'
            )
        if self.approval is None:
            raise ValueError(
                'say when this tool waits: approval = "annotations", "always", "never" or "rules"'
            )
        check_tool_preview(self.preview, self.preview_args, self.preview_ttl, self.approval)
        return self


class McpServerConfig(_Model):
    """`[mcp_servers.NAME]`: a stdio server (`command`, `args`, `env`) or a streamable-HTTP
    one (`url`, `headers`), and when its calls wait for a human.

    `${VAR}` in `headers` and `env` values is taken from the bot's environment when the server
    starts, so tokens stay out of the file; nothing else of that environment reaches a server.
    """

    command: Annotated[StrictStr, Field(min_length=1)] | None = None
    args: tuple[StrictStr, ...] = ()
    env: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    url: Annotated[StrictStr, Field(pattern=r"^https?://")] | None = None
    headers: dict[StrictStr, StrictStr] = Field(default_factory=dict)
    approval: McpApprovalMode = "annotations"
    pin: StrictBool = True
    """Pin each tool's definition at first sight and quarantine it when the server changes it
    (`pins.py`); false turns that off for this server (loudly, at start-up)."""
    timeout: Duration = DEFAULT_START_TIMEOUT
    """The longest the server may take to start and list its tools."""
    call_timeout: Duration = DEFAULT_CALL_TIMEOUT
    """The longest one tool call may take."""
    output_limit: Annotated[StrictInt, Field(gt=0)] = DEFAULT_OUTPUT_LIMIT
    """Characters kept of each tool result (head and tail)."""
    tools: dict[Annotated[StrictStr, Field(min_length=1)], McpToolOverride] = Field(
        default_factory=dict
    )

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                "give either `command` (a stdio server) or `url` (a streamable-HTTP server), "
                "not both and not neither"
            )
        if self.command is None and (self.args or self.env):
            raise ValueError("`args` and `env` are for stdio servers (`command`), not `url`")
        if self.url is None and self.headers:
            raise ValueError("`headers` are for streamable-HTTP servers (`url`), not `command`")
        return self

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "stdio" if self.command is not None else "http"


def expand_variables(
    values: Mapping[str, str], environ: Mapping[str, str], *, where: str
) -> dict[str, str]:
    """`values` with every `${VAR}` replaced from `environ`; a missing one is an error naming
    it and `where` (e.g. "mcp_servers.github.headers.Authorization"). Never shows a value."""
    return expand(values, environ, where=where, error=McpConfigError)
