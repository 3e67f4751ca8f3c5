"""`opsgate hook claude-code`: Claude Code's PreToolUse hook. It reads the hook's JSON on stdin,
asks OpsGate (`Bash` as `run_command` with its `command`; any other tool as
`claude_code.<tool_name>` with `tool_input` as its arguments, so policy rules can name it),
and answers allow or deny on stdout once decided. Anything but an approval, including a
timeout, an expiry or an unreachable OpsGate, is a deny: the hook fails closed."""

from __future__ import annotations

import json
import sys
from typing import IO, Any

from bot.errors import PlaneClientError, PlaneError

from .client import Asked, ask_and_wait

__all__ = ["DEFAULT_WAIT", "claude_code_hook", "hook_body"]

DEFAULT_WAIT = 570.0
"""Seconds to wait for a decision: under the 600 s `timeout` the README's settings give."""


def hook_body(event: dict[str, Any]) -> dict[str, Any]:
    """The approval request for one PreToolUse event."""
    tool = event.get("tool_name")
    tool_input = event.get("tool_input")
    if not isinstance(tool, str) or not tool or not isinstance(tool_input, dict):
        raise PlaneError("the hook's input has no tool_name and tool_input")
    if tool == "Bash":
        body: dict[str, Any] = {
            "tool": "run_command",
            "arguments": {"command": str(tool_input.get("command", ""))},
        }
    else:
        body = {"tool": f"claude_code.{tool}", "arguments": tool_input}
    where = f" in {event['cwd']}" if event.get("cwd") else ""
    session = f" (session {event['session_id']})" if event.get("session_id") else ""
    note = str(tool_input.get("description") or "") if tool == "Bash" else ""
    body["reason"] = f"Claude Code{session}{where}" + (f": {note}" if note else "")
    return body


def _output(decision: str, reason: str) -> dict[str, Any]:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": decision,
            "permissionDecisionReason": reason,
        }
    }


def _verdict(asked: Asked) -> tuple[str, str]:
    answer = asked.answer
    state = asked.state
    if asked.timed_out:
        return "deny", "OpsGate: no decision in time"
    who = ", ".join(answer.get("decided_by") or ())
    if state in ("approved", "allowed"):
        return "allow", f"OpsGate: {state}" + (f" by {who}" if who else "")
    why = answer.get("reason") or "no reason given"
    return "deny", f"OpsGate: {state}" + (f" by {who}" if who else "") + f": {why}"


def claude_code_hook(
    stdin: IO[str] | None = None, stdout: IO[str] | None = None, wait: float = DEFAULT_WAIT
) -> int:
    """Always exits 0 with the decision JSON (Claude Code reads it only then)."""
    source, sink = stdin or sys.stdin, stdout or sys.stdout
    try:
        event = json.loads(source.read())
        if not isinstance(event, dict):
            raise PlaneError("the hook's input is not a JSON object")
        decision, reason = _verdict(ask_and_wait(hook_body(event), wait=wait))
    except PlaneClientError as exc:
        decision, reason = "deny", f"OpsGate could not decide: {exc}"
    except (PlaneError, ValueError) as exc:
        decision, reason = "deny", f"OpsGate hook: {exc}"
    sink.write(json.dumps(_output(decision, reason)) + "\n")
    sink.flush()
    return 0
