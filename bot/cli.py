"""The `opsgate` command: run, check, audit, chat."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="opsgate", description="Slack chat-ops with approvals.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="start the bot (Socket Mode unless --http)")
    run.add_argument("--http", action="store_true", help="serve POST /slack/events instead")
    run.add_argument(
        "--port", type=int, default=None, help="HTTP port, with --http (default OPSGATE_PORT)"
    )
    check = sub.add_parser("check", help="check config, policy, Slack auth.test and the LLM")
    check.add_argument(
        "--http", action="store_true", help="check the settings of `run --http` (not Socket Mode)"
    )
    audit = sub.add_parser("audit", help="print the audit log")
    audit.add_argument("--since", default=None, help="ISO date/time, or a duration like 2h, 7d")
    audit.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    sub.add_parser("chat", help="the same agent, tools and policy in this terminal")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "run" and args.port is not None and not args.http:
        parser.error("run: --port is for HTTP mode; add --http (Socket Mode listens on no port)")
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from .errors import BotError

    try:
        match args.command:
            case "run":
                return _run(http=args.http, port=args.port)
            case "check":
                from .check import run_check

                return asyncio.run(run_check(out=sys.stdout, http=args.http))
            case "audit":
                return _audit(since=args.since, as_json=args.json)
            case "chat":
                from .terminal import run_chat

                return asyncio.run(run_chat())
    except BotError as exc:
        print(f"opsgate: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 2


def _run(*, http: bool, port: int | None) -> int:
    from .server import serve
    from .settings import load_settings

    settings = load_settings(mode="http" if http else "socket")
    asyncio.run(serve(settings, http=http, port=port or settings.opsgate_port))
    return 0


def _audit(*, since: str | None, as_json: bool) -> int:
    from .audit import parse_since, run_audit
    from .settings import load_settings

    try:
        since_at = parse_since(since) if since else None
    except ValueError as exc:
        print(f"opsgate audit: {exc}", file=sys.stderr)
        return 2
    db = load_settings(mode="audit").opsgate_db
    return asyncio.run(run_audit(db, since=since_at, as_json=as_json, out=sys.stdout))


if __name__ == "__main__":
    raise SystemExit(main())
