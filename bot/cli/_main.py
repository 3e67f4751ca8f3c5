"""Parsing the command line, and the one place that turns a fixable error into exit status 2;
and the commands that are one call each (`run`, `migrate`, `mcp tools`).

Every import of the bot is inside the command that needs it: `opsgate --help` and each
command's `--help` load nothing of it.

Exit statuses: 0 done; 1 the command ran and found a problem (`check` failed a check, `audit`
found no database); 2 it could not run (usage, settings, policy, database unusable or locked);
130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from ..settings import DatabaseURL
    from ..store import McpPin

__all__ = [
    "main",
    "mcp_tools_command",
    "migrate_command",
    "print_pins",
    "run_migrate",
]


def _version() -> str:
    try:
        return version("opsgate")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="opsgate", description="Slack chat-ops with approvals.")
    parser.add_argument("--version", action="version", version=f"opsgate {_version()}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run",
        help="start the bot (Socket Mode unless --http; without SLACK_BOT_TOKEN, a local "
        "workspace in the browser)",
    )
    run.add_argument("--http", action="store_true", help="serve POST /slack/events instead")
    run.add_argument(
        "--port",
        type=int,
        default=None,
        help="HTTP port: Slack (with --http), /healthz, /readyz, /metrics (default OPSGATE_PORT)",
    )
    run.add_argument(
        "--host",
        default=None,
        help="the local workspace's address to listen on (default 127.0.0.1: this machine only)",
    )
    check = sub.add_parser("check", help="check config, policy, Slack auth.test and the LLM")
    check.add_argument(
        "--http", action="store_true", help="check the settings of `run --http` (not Socket Mode)"
    )
    check.add_argument("--chat", action="store_true", help="the LLM alone, as `chat` needs it")
    check.add_argument("--tools", action="store_true", help="also ask the model for a tool call")
    audit = sub.add_parser("audit", help="print the audit log")
    audit.add_argument("--since", default=None, help="ISO date/time, or a duration like 2h, 7d")
    audit.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    audit.add_argument(
        "action", nargs="?", choices=["verify"], help="verify: check the hash chain, exit 0 / 1"
    )
    audit.add_argument("--head", default=None, help="with verify: a head printed earlier")
    audit.add_argument(
        "--follow", action="store_true", help="keep printing rows as they are written"
    )
    audit.add_argument(
        "--after",
        type=int,
        default=None,
        metavar="SEQ",
        help="with --follow: start after this seq (the last one a log shipper stored)",
    )
    report = sub.add_parser("report", help="how approvals are given, per rule and tool")
    report.add_argument("--since", default="7d", help="ISO date/time, or a duration (default 7d)")
    report.add_argument("--json", action="store_true", help="one JSON object instead of text")
    sub.add_parser("chat", help="the same agent, tools and policy in this terminal")
    sub.add_parser("migrate", help="bring the database's schema up to date (idempotent)")
    mcp = sub.add_parser("mcp", help="MCP tool servers")
    mcp_inner = mcp.add_subparsers(dest="mcp_command", required=True)
    tools = mcp_inner.add_parser("tools", help="each pinned MCP tool, its digest and state")
    tools.add_argument("--json", action="store_true", help="JSON lines instead of text")
    _add_policy_parser(sub)
    _add_plane_parsers(sub)
    return parser


def _add_plane_parsers(sub: Any) -> None:
    """`ask`, `receipt verify`, `exec-approved`: the approval plane's client commands."""
    ask = sub.add_parser("ask", help="ask OpsGate for an approval; block until decided")
    ask.add_argument("--channel", default=None, help="where the card goes (C...)")
    ask.add_argument("--tool", default="run_command", help="the tool (default run_command)")
    ask.add_argument("--args", default=None, help="with --tool: its arguments as JSON")
    ask.add_argument("--reason", default=None, help="why, shown on the card")
    ask.add_argument("--requester", default=None, help="the Slack user asking (U...)")
    ask.add_argument("--wait", default=None, help="give up after DURATION (exit 3), e.g. 15m")
    ask.add_argument("--json", action="store_true", help="print the whole answer as JSON")
    ask.add_argument("--exec", action="store_true", help="run the approved argv (no shell)")
    ask.add_argument("argv", nargs="*", help="-- then the command")
    receipt = sub.add_parser("receipt", help="check an approval receipt")
    inner = receipt.add_subparsers(dest="receipt_command", required=True)
    verify = inner.add_parser("verify", help="signature, expiry, argv; exit 0 valid, 1 not")
    verify.add_argument("receipt", help="the receipt (- reads stdin)")
    verify.add_argument("--keys", default=None, help="JWKS URL or file, or PEM key file")
    verify.add_argument("--once", default=None, help="SQLite file of used receipts: refuse reuse")
    verify.add_argument("--argv", nargs=argparse.REMAINDER, default=None, help="the command")
    run = sub.add_parser("exec-approved", help="verify the receipt, then exec the command")
    run.add_argument("receipt", help="the receipt (- reads stdin)")
    run.add_argument("--keys", default=None, help="JWKS URL or file, or PEM key file")
    run.add_argument("--once", default=None, help="SQLite file of used receipts: refuse reuse")
    run.add_argument("argv", nargs="*", help="-- then the command")
    hook = sub.add_parser("hook", help="an agent's hook that asks OpsGate (claude-code)")
    hook.add_argument("agent", choices=["claude-code"], help="claude-code: its PreToolUse hook")
    hook.add_argument("--wait", default=None, help="deny after DURATION undecided (default 9m30s)")
    sub.add_parser("mcp-serve", help="an MCP server (stdio) with the tool request_approval")


def _add_policy_parser(sub: Any) -> None:
    """`opsgate policy explain|replay|diff ...`: here, so that `--help` loads no policy code."""
    policy = sub.add_parser("policy", help="ask the policy about a call, running nothing")
    inner = policy.add_subparsers(dest="policy_command", required=True)
    explain_ = inner.add_parser("explain", help="the verdict for one call (runs nothing)")
    explain_.add_argument("--channel", default=None, help="the channel id (C...) it would run in")
    explain_.add_argument("tool", help="the tool's name, e.g. run_command")
    explain_.add_argument("args", nargs="+", help="run_command: the command; else JSON arguments")
    replay = inner.add_parser("replay", help="judge the ledger's calls again under a new policy")
    replay.add_argument("new", metavar="NEW.toml", help="the policy to try")
    replay.add_argument(
        "--against", default=None, help="the policy to compare with (default OPSGATE_POLICY)"
    )
    replay.add_argument("--since", default="30d", help="ISO date/time, or a span like 30d, 2w")
    replay.add_argument("--json", action="store_true", help="one JSON object")
    replay.add_argument(
        "--fail-on-loosen", action="store_true", help="exit 1 when any call would be looser"
    )
    diff = inner.add_parser("diff", help="the rules two policy files add, remove and change")
    diff.add_argument("old", metavar="OLD.toml")
    diff.add_argument("new", metavar="NEW.toml")


def _command(args: argparse.Namespace) -> Callable[[], int]:
    """The chosen command, imported only now: `opsgate audit` need not load Slack's SDK."""
    match args.command:
        case "run":
            return lambda: run_bot(
                http=args.http, port=args.port, verbose=args.verbose, host=args.host
            )
        case "check":
            from .check import run_check

            return lambda: asyncio.run(
                run_check(
                    out=sys.stdout,
                    http=args.http,
                    chat=args.chat,
                    tools=args.tools,
                    verbose=args.verbose,
                )
            )
        case "audit":
            from .audit import audit_command

            return lambda: audit_command(
                since=args.since,
                as_json=args.json,
                action=args.action,
                head=args.head,
                follow=args.follow,
                after=args.after,
            )
        case "report":
            from .report import report_command

            return lambda: report_command(since=args.since, as_json=args.json)
        case "chat":
            from .chat import run_chat

            return lambda: asyncio.run(run_chat(verbose=args.verbose))
        case "migrate":
            return migrate_command
        case "policy":
            return _policy_command(args)
        case "mcp":
            return lambda: mcp_tools_command(as_json=args.json)
        case "ask" | "receipt" | "exec-approved" | "hook" | "mcp-serve":
            return _plane_command(args)
    raise AssertionError(f"unknown command {args.command!r}")  # argparse allows no other


def _policy_command(args: argparse.Namespace) -> Callable[[], int]:
    match args.policy_command:
        case "replay":
            from .replay import replay_command

            return lambda: replay_command(args)
        case "diff":
            from .policy import diff_command

            return lambda: diff_command(args)
    from .policy import explain_command

    return lambda: explain_command(args)


def _plane_command(args: argparse.Namespace) -> Callable[[], int]:
    from ..plane import cli

    if args.command == "ask":
        return lambda: cli.ask_command(
            argv=args.argv,
            tool=args.tool,
            args_json=args.args,
            channel=args.channel,
            reason=args.reason,
            requester=args.requester,
            wait=args.wait,
            as_json=args.json,
            run=args.exec,
        )
    if args.command == "hook":
        from ..plane.cli import DEFAULT_WAIT, claude_code_hook

        wait = cli.parse_wait(args.wait)
        return lambda: claude_code_hook(wait=DEFAULT_WAIT if wait is None else wait)
    if args.command == "mcp-serve":
        return cli.serve_mcp
    if args.command == "receipt":
        return lambda: cli.receipt_verify_command(
            receipt=args.receipt, argv=args.argv, keys=args.keys, once=args.once
        )
    return lambda: cli.exec_approved_command(
        receipt=args.receipt, argv=args.argv, keys=args.keys, once=args.once
    )


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """`ask ... -- ARGV` and `exec-approved RECEIPT ... -- ARGV`: everything after `--` is the
    command, whatever options came before it (argparse would stop at the first positional)."""
    words = [w for w in argv if not w.startswith("-")]
    if "--" not in argv or not words or words[0] not in ("ask", "exec-approved"):
        return parser.parse_args(argv)
    cut = argv.index("--")
    args = parser.parse_args(argv[:cut])
    args.argv = [*args.argv, *argv[cut + 1 :]]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = _parse(parser, list(sys.argv[1:] if argv is None else argv))
    from ..observability import configure_logging

    # Until a command has read the settings (`OPSGATE_LOG_FORMAT`, `OPSGATE_LOG_LEVEL`).
    configure_logging("text", logging.DEBUG if args.verbose else logging.INFO)
    from ..errors import BotError
    from ..store import StoreError

    try:
        code = _command(args)()
        sys.stdout.flush()  # here, so that a closed pipe is seen below and not at exit
    except (BotError, StoreError) as exc:
        print(f"opsgate: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return _reader_gone()
    except KeyboardInterrupt:
        return 130
    return code


def _reader_gone() -> int:
    """`opsgate audit --json | head -1`: the reader has what it wanted, so stop quietly.

    stdout is pointed at /dev/null so that Python's own flush at exit does not fail again and
    print a traceback. Status 0, as `head` asked for no more: a pipeline under `pipefail` should
    not fail because of it.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 0


def run_bot(*, http: bool, port: int | None, verbose: bool = False, host: str | None = None) -> int:
    """`opsgate run [--http [--port N]]`: serve until stopped, in Socket Mode or serving HTTP;
    without SLACK_BOT_TOKEN, the local workspace (`bot.workspace`). Settings, policy and
    database errors propagate to `main`."""
    from ..observability import log_from_settings
    from ..server import serve  # imported only now: other commands need not load Slack's SDK
    from ..settings import load_settings

    local = load_settings(mode="workspace")
    if not local.slack_bot_token.get_secret_value():
        from ..workspace import LOOPBACK, serve_workspace
        from .policy import explain_text

        # Its one line, not the bot's INFO logs, is what a newcomer reads (-v shows them).
        log_from_settings(local, verbose=verbose, floor="WARNING")
        where = host or LOOPBACK
        port = port or local.opsgate_port
        asyncio.run(serve_workspace(local, explain=explain_text, host=where, port=port))
        return 0
    settings = load_settings(mode="http" if http else "socket")
    log_from_settings(settings, verbose=verbose)
    asyncio.run(serve(settings, http=http, port=port or settings.opsgate_port))
    return 0


# -- opsgate migrate -----------------------------------------------------------------------------
# Brings the configured database's schema up to date (idempotent). Start-up migrates too; this
# is for doing it ahead of a rolling upgrade of replicas, or to check what version a database
# is at. Several replicas or `migrate`s at once are safe: PostgreSQL migrates under an advisory
# lock, SQLite under its write lock.


async def run_migrate(db: Path | DatabaseURL, *, out: TextIO) -> int:
    """Migrate `db` (a `Path` or a `DatabaseURL`); print one line saying where it stands."""
    from ..settings import DatabaseURL
    from ..store import SCHEMA_VERSION, SQLiteStore

    if isinstance(db, DatabaseURL):
        return await _migrate_postgres(db, out)
    async with SQLiteStore(db):  # opening migrates (or refuses a newer file)
        pass
    print(_line(str(db), None, SCHEMA_VERSION, SCHEMA_VERSION), file=out)
    return 0


async def _migrate_postgres(url: DatabaseURL, out: TextIO) -> int:
    from ..store import SCHEMA_VERSION as PG_VERSION
    from ..store import PostgresStore

    async with PostgresStore(url.get_secret_value(), migrate=False) as store:
        before = await store.schema_version()
        after = await store.migrate()
    print(_line(str(url), before, after, PG_VERSION), file=out)
    return 0


def _line(name: str, before: int | None, after: int, latest: int) -> str:
    if before is not None and before < after:
        return f"migrated {name!r} from schema version {before} to {after} (the latest)"
    state = "the latest" if after == latest else f"this OpsGate knows up to {latest}"
    return f"{name!r} is at schema version {after} ({state})"


def migrate_command() -> int:
    from ..settings import load_settings

    db = load_settings(mode="audit").opsgate_db
    return asyncio.run(run_migrate(db, out=sys.stdout))


# -- opsgate mcp tools [--json] ------------------------------------------------------------------
# Every pinned MCP tool with its digest and state, read from the database (read-only; the
# servers are not started). A `quarantined` tool's server lists a definition other than the
# reviewed one (its digest is shown as `listed`): its calls need approval until an MCP admin
# accepts the new definition.


def mcp_tools_command(*, as_json: bool) -> int:
    from ..settings import load_settings

    settings = load_settings(mode="audit")
    pins = asyncio.run(_pins(settings.opsgate_db))
    print_pins(pins, as_json=as_json, out=sys.stdout)
    return 0


async def _pins(db: Path | DatabaseURL) -> list[McpPin]:
    from ..errors import McpToolsError
    from ..settings import DatabaseURL
    from ..store import SQLiteStore, StoreError, open_store

    try:
        if isinstance(db, DatabaseURL):
            async with open_store(db, migrate=False) as store:
                return await store.mcp_pins()
        if not await asyncio.to_thread(db.is_file):
            return []
        async with SQLiteStore(db) as sqlite:
            return await sqlite.mcp_pins()
    except StoreError as exc:
        raise McpToolsError(f"mcp tools: cannot read the pins: {exc}") from None


def print_pins(pins: list[McpPin], *, as_json: bool, out: TextIO) -> None:
    if as_json:
        for pin in pins:
            row = {
                "tool": f"{pin.server}__{pin.tool}",
                "server": pin.server,
                "state": pin.state,
                "digest": pin.digest,
                "listed_digest": pin.listed_digest,
                "pinned_at": pin.pinned_at.isoformat(),
                "accepted_by": pin.accepted_by,
            }
            print(json.dumps(row, sort_keys=True), file=out)
        return
    if not pins:
        print("no MCP tool is pinned yet (tools are pinned when the bot starts)", file=out)
        return
    for pin in pins:
        listed = f" (listed now: {pin.listed_digest})" if pin.listed_digest else ""
        print(f"{pin.server}__{pin.tool}  {pin.state}  {pin.digest}{listed}", file=out)
