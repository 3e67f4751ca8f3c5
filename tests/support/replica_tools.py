"""Tools for the multi-replica tests: each run leaves a line in `$REPLICA_TEST_DIR/ran.log`
(process id and arguments), so a test can tell which replica ran a call and that none ran twice,
and posts the same line to `$REPLICA_TEST_HOOK` (the Slack stand-in), so a test can wait for it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import httpx

from agent_core import tool

__all__ = ["deploy", "hang"]


async def _note(what: str) -> None:
    line = f"{os.getpid()} {what}"
    log = Path(os.environ["REPLICA_TEST_DIR"]) / "ran.log"
    with log.open("a") as file:
        file.write(line + "\n")
    async with httpx.AsyncClient() as client:
        await client.post(os.environ["REPLICA_TEST_HOOK"], json={"text": line})


@tool(requires_approval=True)
async def deploy(service: str) -> str:
    """Deploy a service (test tool: notes that it ran)."""
    await _note(f"deploy {service}")
    return f"deployed {service}"


@tool(requires_approval=True)
async def hang(name: str) -> str:
    """Start something that never finishes (test tool: notes that it started, then waits)."""
    await _note(f"hang {name}")
    await asyncio.Event().wait()
    return "unreachable"
