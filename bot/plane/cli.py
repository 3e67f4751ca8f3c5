"""`opsgate ask`, `opsgate receipt verify`, `opsgate exec-approved`, `opsgate hook` and
`opsgate mcp-serve`: the plane's commands on the hosts of other automation, and the HTTP client
they ask through. They load no Slack code (and `--help` loads none of this; `mcp-serve` alone
loads the MCP SDK).

`ask` exits 0 approved (or allowed), 1 rejected or forbidden, 3 expired or `--wait` elapsed,
2 usage or connection errors; `receipt verify` 0 valid, 1 invalid (one line naming what
failed).

`opsgate hook claude-code` is Claude Code's PreToolUse hook. It reads the hook's JSON on stdin,
asks OpsGate (`Bash` as `run_command` with its `command`; any other tool as
`claude_code.<tool_name>` with `tool_input` as its arguments, so policy rules can name it),
and answers allow or deny on stdout once decided. Anything but an approval, including a
timeout, an expiry or an unreachable OpsGate, is a deny: the hook fails closed.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from bot.errors import PlaneClientError, PlaneError, ReceiptInvalid

from ..words import parse_duration
from .receipts import check_receipt

__all__ = [
    "DEFAULT_WAIT",
    "Asked",
    "ask_and_wait",
    "ask_command",
    "claude_code_hook",
    "client_from_env",
    "exec_approved_command",
    "hook_body",
    "parse_wait",
    "receipt_verify_command",
    "request_approval",
    "serve_mcp",
]


def parse_wait(text: str | None) -> float | None:
    """`--wait` as seconds ("90s", "15m", "1h30m"); None: until decided."""
    if text is None:
        return None
    try:
        return parse_duration(text).total_seconds()
    except ValueError as exc:
        raise PlaneError(f"--wait: {exc}") from None


def _argv(raw: Sequence[str]) -> list[str]:
    return list(raw[1:] if raw and raw[0] == "--" else raw)


def _say(text: str) -> None:
    print(f"opsgate: {text}", file=sys.stderr, flush=True)


def _body(
    tool: str, argv: list[str], args_json: str | None, **fields: str | None
) -> dict[str, Any]:
    if tool == "run_command":
        if not argv:
            raise PlaneError("ask: name the command after --, e.g. opsgate ask -- ./deploy.sh prod")
        arguments: Any = {"command": shlex.join(argv)}
    else:
        try:
            arguments = json.loads(args_json or "{}")
        except ValueError as exc:
            raise PlaneError(f"--args: not JSON: {exc}") from None
    body: dict[str, Any] = {"tool": tool, "arguments": arguments}
    return body | {k: v for k, v in fields.items() if v is not None}


def ask_command(
    *,
    argv: Sequence[str],
    tool: str = "run_command",
    args_json: str | None = None,
    channel: str | None = None,
    reason: str | None = None,
    requester: str | None = None,
    wait: str | None = None,
    as_json: bool = False,
    run: bool = False,
) -> int:
    try:
        body = _body(
            tool, _argv(argv), args_json, channel=channel, reason=reason, requester=requester
        )
        asked = ask_and_wait(body, wait=parse_wait(wait), on_link=lambda u: _say(f"card: {u}"))
    except PlaneClientError as exc:
        _say(str(exc))
        return 1 if exc.status == 403 else 2
    except PlaneError as exc:
        _say(str(exc))
        return 2
    answer = asked.answer
    if as_json:
        print(json.dumps(answer))
    if asked.timed_out:
        _say(f"no decision within --wait {wait}; request {answer.get('id')} is still pending")
        return 3
    state = asked.state
    if state in ("approved", "allowed"):
        receipt = str(answer.get("receipt", ""))
        if not as_json:
            print(receipt, flush=True)
        if run:
            return _run_approved(receipt, _argv(argv))
        return 0
    _say(f"{state}: {answer.get('reason') or 'no reason given'}")
    return 3 if state == "expired" else 1


def _run_approved(receipt: str, argv: list[str]) -> int:
    """Run exactly the approved argv (no shell), the receipt in its `OPSGATE_RECEIPT`."""
    from .receipts import unverified_claims

    approved = unverified_claims(receipt).argv
    if approved is None or list(approved) != argv:
        _say(f"--exec: the approved command is {approved!r}, not {argv!r}; not run")
        return 1
    sys.stdout.flush()
    env = {**os.environ, "OPSGATE_RECEIPT": receipt}
    try:
        return subprocess.run(list(approved), env=env, check=False).returncode
    except OSError as exc:
        _say(f"--exec: cannot run {approved[0]!r}: {exc}")
        return 127


def _keys(source: str | None) -> str:
    found = source or os.environ.get("OPSGATE_URL")
    if not found:
        raise PlaneError("name the verification keys: --keys URL_OR_FILE (or set OPSGATE_URL)")
    return found


def _receipt_text(text: str) -> str:
    return sys.stdin.read().strip() if text == "-" else text


def receipt_verify_command(
    *, receipt: str, argv: Sequence[str] | None, keys: str | None, once: str | None
) -> int:
    try:
        claims = check_receipt(
            _receipt_text(receipt),
            _keys(keys),
            argv=None if argv is None else list(argv),
            once=None if once is None else Path(once),
        )
    except ReceiptInvalid as exc:
        print(f"receipt invalid: {exc}", file=sys.stderr)
        return 1
    approvers = ", ".join(claims.approvers) or "the policy"
    print(f"receipt valid: {claims.tool} {claims.digest} approved by {approvers}")
    return 0


def exec_approved_command(
    *, receipt: str, argv: Sequence[str], keys: str | None, once: str | None
) -> int:
    """Verify (argv included), then replace this process with the command."""
    command = _argv(argv)
    if not command:
        raise PlaneError("exec-approved: name the command after --")
    text = _receipt_text(receipt)
    try:
        check_receipt(text, _keys(keys), argv=command, once=None if once is None else Path(once))
    except ReceiptInvalid as exc:
        print(f"receipt invalid: {exc}", file=sys.stderr)
        return 1
    sys.stdout.flush()
    try:
        os.execvpe(command[0], command, {**os.environ, "OPSGATE_RECEIPT": text})
    except OSError as exc:
        _say(f"exec-approved: cannot run {command[0]!r}: {exc}")
        return 127


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


# -- the plane's HTTP client ---------------------------------------------------------------------
# A client of the plane's HTTP API (OPSGATE_URL, OPSGATE_CLIENT_TOKEN): ask, then wait for the
# decision with long polls; every command here, the hook and mcp-serve ask through it.

LONG_POLL = 55.0
LINK_POLL = 1.0


@dataclass(frozen=True, slots=True)
class Asked:
    """The last answer about a request; `timed_out`: the caller's wait ended first."""

    answer: dict[str, Any]
    timed_out: bool = False

    @property
    def state(self) -> str:
        return str(self.answer.get("state"))


def client_from_env() -> tuple[str, str]:
    url = os.environ.get("OPSGATE_URL", "").rstrip("/")
    token = os.environ.get("OPSGATE_CLIENT_TOKEN", "")
    if not url:
        raise PlaneClientError(
            "OPSGATE_URL is not set (the bot's address, e.g. http://opsgate:3000)"
        )
    if not token:
        raise PlaneClientError("OPSGATE_CLIENT_TOKEN is not set (this client's bearer token)")
    return url, token


def _json(response: httpx.Response) -> dict[str, Any]:
    if response.status_code >= 400:
        try:
            why = str(response.json().get("error"))
        except ValueError:
            why = response.text.strip()
        raise PlaneClientError(
            f"OpsGate answered {response.status_code}: {why}", response.status_code
        )
    data = response.json()
    if not isinstance(data, dict):
        raise PlaneClientError("OpsGate answered something other than a JSON object")
    return data


def ask_and_wait(
    body: dict[str, Any],
    *,
    wait: float | None = None,
    on_link: Callable[[str], None] = lambda _: None,
    url: str | None = None,
    token: str | None = None,
) -> Asked:
    """Post the request, then long-poll until it is decided or `wait` seconds passed (None:
    until decided). `on_link` gets the card's permalink once known."""
    if url is None or token is None:
        url, token = client_from_env()
    headers = {"Authorization": f"Bearer {token}"}
    deadline = None if wait is None else time.monotonic() + wait
    try:
        with httpx.Client(timeout=httpx.Timeout(10.0, read=LONG_POLL + 15)) as http:
            posted = _json(http.post(f"{url}/v1/approvals", json=body, headers=headers))
            where = f"{url}/v1/approvals/{posted['id']}"
            linked = False
            # The first read does not wait: the card's link is shown while people decide.
            left = 0.0
            while True:
                params = {"wait": f"{max(0.0, min(LONG_POLL, left)):.1f}"}
                answer = _json(http.get(where, params=params, headers=headers))
                if answer.get("permalink") and not linked:
                    on_link(str(answer["permalink"]))
                    linked = True
                if answer.get("state") != "pending":
                    return Asked(answer)
                left = LONG_POLL if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    return Asked(answer, timed_out=True)
                if not linked:  # short polls until the card is posted and its link known
                    left = min(left, LINK_POLL)
    except httpx.HTTPError as exc:
        raise PlaneClientError(f"cannot reach OpsGate at {url}: {exc}") from None


# -- opsgate mcp-serve ---------------------------------------------------------------------------
# An MCP server on stdio (the official SDK) whose one tool, `request_approval`, asks OpsGate for
# a decision (as `opsgate ask` does) and blocks until it is made. The SDK is imported when the
# server starts, so the other commands here do not load it.


async def request_approval(
    tool: str, arguments: dict[str, Any], reason: str | None = None
) -> dict[str, Any]:
    """Ask people in Slack to approve one tool call before you make it; blocks until they
    decide. `state` is approved, allowed (no approval needed), rejected, forbidden or expired;
    only approved and allowed mean go ahead. `receipt` proves the approval."""
    body: dict[str, Any] = {"tool": tool, "arguments": arguments}
    if reason:
        body["reason"] = reason
    try:
        asked = await asyncio.to_thread(ask_and_wait, body)
    except PlaneClientError as exc:
        return {"state": "error", "reason": str(exc), "receipt": None}
    answer = asked.answer
    return {
        "state": answer.get("state"),
        "reason": answer.get("reason"),
        "decided_by": answer.get("decided_by") or [],
        "receipt": answer.get("receipt"),
    }


def serve_mcp() -> int:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("opsgate", instructions="Ask OpsGate for a human approval in Slack.")
    server.tool()(request_approval)
    server.run("stdio")
    return 0
