"""The tools the bot offers: the built-ins as the policy sets them up, teams' own tools
loaded from import paths named in the policy file (`tools_modules`), and each tool in a few
words for the people deciding on its card (`tool_summary`).

Loading runs at start-up, so a path that cannot be loaded stops the bot with a message naming the
path and the reason, rather than surfacing later as a tool the model cannot find.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

import httpx

from agent_core import Tool
from bot.errors import ToolLoadError
from bot.policy import Policy, ToolPolicy

from .command import DEFAULT_OUTPUT_LIMIT, DEFAULT_TIMEOUT, make_run_command, resolve_run_as
from .http import make_http_request

__all__ = [
    "BUILT_IN_SUMMARIES",
    "TEMPLATE_WARNING",
    "default_tools",
    "load_tool",
    "load_tools",
    "tool_summary",
]

TEMPLATE_WARNING = (
    "the model server says its chat template has no tool support, so it ignores the tools "
    "and the bot only chats: serve the model with a chat template that handles tools "
    "(llama.cpp: --jinja and --chat-template-file; Ollama, LM Studio: a model whose "
    "template supports tools)"
)
"""Logged at start-up and printed by `opsgate check` when the server answers without tools."""


def default_tools(http: httpx.AsyncClient, policy: Policy | None = None) -> list[Tool]:
    """The built-in tools, set up as the policy's `[tools.run_command]` says (workdir, timeout,
    output_limit; without them: the current directory, 60 seconds, 20,000 characters)."""
    command = (policy or Policy.default()).tools.get("run_command") or ToolPolicy()
    return [
        make_run_command(
            workdir=command.workdir or Path.cwd(),
            timeout=command.timeout.total_seconds() if command.timeout else DEFAULT_TIMEOUT,
            output_limit=command.output_limit or DEFAULT_OUTPUT_LIMIT,
            env=command.env,
            run_as=resolve_run_as(command.run_as) if command.run_as else None,
        ),
        make_http_request(client=http),
    ]


def _split(import_path: str) -> tuple[str, str]:
    path = import_path.strip()
    if ":" in path:
        module, _, attribute = path.partition(":")
    else:
        module, _, attribute = path.rpartition(".")
    if not module or not attribute:
        raise ToolLoadError(
            f"cannot load tool {import_path!r}: write it as 'package.module:attribute' "
            "(or 'package.module.attribute')"
        )
    return module, attribute


def load_tool(import_path: str) -> Tool:
    """Import "package.module:attribute" (or dotted) and check it is an agent_core `Tool`."""
    module_name, attribute = _split(import_path)
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ToolLoadError(
            f"cannot load tool {import_path!r}: module {module_name!r} could not be imported: {exc}"
        ) from exc
    except Exception as exc:  # the module itself crashed while importing
        raise ToolLoadError(
            f"cannot load tool {import_path!r}: importing {module_name!r} raised "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ToolLoadError(
                f"cannot load tool {import_path!r}: module {module_name!r} has no attribute "
                f"{attribute!r}"
            ) from None
    if isinstance(target, type) or not isinstance(target, Tool):
        raise ToolLoadError(
            f"cannot load tool {import_path!r}: it is a {type(target).__name__}, not an "
            "agent_core tool; decorate the function with @tool from agent_core"
        )
    return target


def load_tools(import_paths: Iterable[str], *, taken: Iterable[str] = ()) -> list[Tool]:
    """Load several tools; two tools with one name (or a name in `taken`) is an error too."""
    names = {name: "a built-in tool" for name in taken}
    tools: list[Tool] = []
    for path in import_paths:
        loaded = load_tool(path)
        if loaded.name in names:
            raise ToolLoadError(
                f"cannot load tool {path!r}: its name {loaded.name!r} is already used by "
                f"{names[loaded.name]}"
            )
        names[loaded.name] = repr(path)
        tools.append(loaded)
    return tools


# A tool in a few words for the people deciding on its card.
#
# A tool's `description` is written for the model (what it returns, its limits, how to call
# it); an approver needs one line saying what it does. A tool may carry a `summary` attribute;
# the built-ins have one here; anything else shows the first sentence of its description.

BUILT_IN_SUMMARIES: Final = {
    "run_command": "Runs a shell command on the operations host.",
    "http_request": "Sends an HTTP request.",
}

_SUMMARY_MAX = 160
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


def tool_summary(tool: Tool) -> str:
    """One line about `tool` for people: its `summary`, a built-in's, or its first sentence."""
    own = getattr(tool, "summary", None)
    if isinstance(own, str) and own.strip():
        return own.strip()
    if tool.name in BUILT_IN_SUMMARIES:
        return BUILT_IN_SUMMARIES[tool.name]
    first = _SENTENCE_END.split(tool.description.strip(), maxsplit=1)[0].strip()
    if len(first) > _SUMMARY_MAX:
        first = first[: _SUMMARY_MAX - 1].rstrip() + "…"
    return first
