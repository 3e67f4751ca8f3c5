"""A team's own tools, as the policy file's `tools_modules` would name them (loader tests)."""

from __future__ import annotations

from agent_core import tool

__all__ = ["NOT_A_TOOL", "STATUS", "plain_function", "restart_service", "service_status"]

NOT_A_TOOL = 42

STATUS: dict[str, str] = {}
"""What `service_status` reports per service (tests change it); absent: "running"."""


@tool(requires_approval=True)
async def restart_service(name: str, force: bool = False) -> str:
    """Restart a systemd service (sample: only says what it would do)."""
    return f"would restart {name}{' (forced)' if force else ''}"


@tool
async def service_status(name: str) -> str:
    """Report a service's state (read-only: `restart_service`'s paired preview)."""
    return f"{name}: {STATUS.get(name, 'running')}"


def plain_function(name: str) -> str:
    """Looks like a tool but was never decorated with @tool."""
    return name
