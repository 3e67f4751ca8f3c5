"""The line of an approval card that names an MCP server's tool and its annotations.

The server's title for the tool is untrusted (a server says what it likes), so it is escaped;
the labels are ours. A tool annotated destructive is flagged where nobody can miss it.
"""

from __future__ import annotations

from ..runs.views import ServerTool
from ._text import code_span, escape_cut, one_line

__all__ = ["server_tool_text"]

_TITLE_MAX = 200


def server_tool_text(tool: ServerTool) -> str:
    """e.g. ":warning: *destructive* · MCP server `k8s`, tool `delete_pod` (Delete a pod)"."""
    named = f"MCP server {code_span(tool.server, 60)}, tool {code_span(tool.tool, 80)}"
    if tool.title and tool.title != tool.tool:
        named += f" ({one_line(tool.title, _TITLE_MAX)})"
    labels = [label for label in tool.labels if not (tool.destructive and label == "destructive")]
    hints = f" · _{escape_cut(', '.join(labels), 200)}_" if labels else ""
    warning = ":warning: *destructive* · " if tool.destructive else ""
    return f"{warning}{named}{hints}"
