"""A server tool's definition as it was reviewed: what is pinned, its digest, and how a later
listing differs, field by field.

The definition is what the policy and the model rely on: the tool's name, its description, its
input schema and its annotations (`readOnlyHint` decides a call under `approval =
"annotations"`). The digest is SHA-256 over its canonical JSON, so any change in any field
changes it. The store keeps the pins (`bot.store.mcp_pins`); a tool whose listing differs from
its pin is quarantined (`McpTool.quarantined`) until an MCP admin accepts the new definition.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

from .tool import McpTool

__all__ = ["ToolDefinition", "changed_fields", "definition_of"]

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
