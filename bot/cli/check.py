"""`opsgate check`: is the configuration complete, would the policy and tools start, does Slack
accept the token, is the LLM there?

It runs the same steps as start-up (settings for the chosen mode, policy, tools, MCP servers,
`check_tools`) so that what would stop `opsgate run` is reported here first, in plain words.

Its `warn` lines are about the policy file's names: a rule's program that is on no
PATH the tools use, an approver Slack does not know, a channel the bot is not in. Warnings,
not failures: a program may be installed later, a channel joined after the check; but each is
a rule that quietly never matches, or an approval nobody can give.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

import httpx
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agent_core import resolve_context_window
from agent_core.exceptions import ChatClientError, ProviderError
from agent_core.openai import OpenAIChatClient

from ..errors import BotError, SignInRefused, slack_unreachable
from ..observability import log_from_settings
from ..policy import Policy, ToolPolicy
from ..settings import DatabaseURL, Settings, load_settings
from ..tools import (
    TEMPLATE_WARNING,
    default_tools,
    load_tools,
    privilege_warnings,
    resolve_run_as,
)
from ..tools.mcp import check_servers

__all__ = [
    "program_warnings",
    "run_check",
    "slack_warnings",
]

Report = Callable[[bool, str], None]


async def run_check(
    *,
    out: TextIO,
    settings: Settings | None = None,
    http: bool = False,
    chat: bool = False,
    tools: bool = False,
    verbose: bool = False,
) -> int:
    """Print one line per check, in plain words; exit status 1 if any failed.

    `http` checks the settings `opsgate run --http` needs instead of Socket Mode's (it applies
    when `settings` is None, i.e. when they are read from the environment and `.env`).
    `chat` checks what `opsgate chat` needs, and the LLM, without Slack; so does a check
    whose settings name no SLACK_BOT_TOKEN (someone trying `opsgate chat` first). `tools`
    also asks the model for a tool call, to catch a chat template that ignores tools.
    """
    failures = 0

    def report(ok: bool, text: str) -> None:
        nonlocal failures
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {text}", file=out)

    def warn(text: str) -> None:
        print(f"warn {text}", file=out)

    if settings is None and not http and not chat and not _slack_configured():
        chat = True
        print("note SLACK_BOT_TOKEN is not set: checking what `opsgate chat` needs", file=out)
    mode = "HTTP mode" if http else "`opsgate chat`" if chat else "Socket Mode"
    if settings is None:
        try:
            settings = load_settings(mode="http" if http else "chat" if chat else "socket")
        except BotError as exc:
            report(False, f"configuration ({mode}): {exc}")
            return 1
    report(True, f"configuration: every setting {mode} needs is present")
    log_from_settings(settings, verbose=verbose)

    policy = await _check_policy(settings, report)
    if policy is not None:
        for warning in (*_privilege_warnings(policy, settings), *program_warnings(policy)):
            warn(warning)
        if not chat:  # the terminal chat serves no API
            print(f"note {_plane_note(policy)}", file=out)
    if isinstance(settings.opsgate_db, DatabaseURL):
        await _check_postgres(settings.opsgate_db, report)
    if not chat:
        if await _check_slack(settings, report) and policy is not None:
            try:
                for warning in await slack_warnings(policy, _slack_client(settings)):
                    warn(warning)
            except Exception as exc:  # a warning's lookup failing is no reason to fail a check
                warn(f"slack: could not look up the policy's approvers and channels ({exc})")
        if not http:
            await _check_socket_mode(settings, report)
    await _check_llm(settings, report, warn, tools=tools)
    return 1 if failures else 0


def _slack_configured() -> bool:
    """Whether the environment (or `.env`) names a bot token at all; a malformed one counts
    as named, so that its check reports it."""
    try:
        return bool(Settings().slack_bot_token.get_secret_value())
    except ValueError:
        return True


async def _check_policy(settings: Settings, report: Report) -> Policy | None:
    """Load the policy, build the built-in tools, import `tools_modules`, start each MCP server
    and list its tools (one line each), run `check_tools`."""
    path = settings.opsgate_policy
    try:
        policy = Policy.load(path) if path else Policy.default()
        async with httpx.AsyncClient() as tool_http:  # never used: the tools are only built
            built_in = default_tools(tool_http, policy)
        loaded = load_tools(policy.tools_modules, taken=[t.name for t in built_in])
        names = [t.name for t in (*built_in, *loaded)]
        servers = await check_servers(policy.mcp_servers, taken=names)
        for server in servers:
            report(server.kind == "ok", server.line)
            names += server.tools
        failed = [server.server for server in servers if server.kind == "failed"]
        policy.check_tools(names, unchecked_servers=failed)
    except (BotError, ValueError) as exc:  # ValueError: a built-in tool refused its settings
        report(False, f"policy: {exc}")
        return None
    where = f"{path} is valid" if path else "no policy file; using the built-in defaults"
    report(True, f"policy: {where}; tools: {', '.join(sorted(names))}")
    return policy


def _plane_note(policy: Policy) -> str:
    """Whether outside automation may ask for approvals (`[plane.clients]`)."""
    clients = sorted(policy.plane.clients)
    if not clients:
        return "approval plane: off (no [plane.clients] in the policy; /v1/approvals answers 404)"
    return f"approval plane: on for {', '.join(clients)} (POST /v1/approvals)"


def _privilege_warnings(policy: Policy, settings: Settings) -> list[str]:
    """Where commands could reach the bot's own files (run_as, workdir); see README."""
    command = policy.tools.get("run_command") or ToolPolicy()
    run_as = resolve_run_as(command.run_as) if command.run_as else None  # checked just above
    database = settings.opsgate_db if isinstance(settings.opsgate_db, Path) else None
    return privilege_warnings(run_as, command.workdir or Path.cwd(), database)


async def _check_postgres(url: DatabaseURL, report: Report) -> None:
    """Connect without changing anything and read the schema version."""
    from ..store import SCHEMA_VERSION, PostgresStore, StoreError

    try:
        async with PostgresStore(url.get_secret_value(), migrate=False, max_size=1) as store:
            found = await store.schema_version()
    except StoreError as exc:  # the message names the database with its password redacted
        report(False, f"database: {exc}")
        return
    if found == SCHEMA_VERSION:
        report(True, f"database: {url} answers, schema version {found} (the latest)")
    else:
        report(
            True,
            f"database: {url} answers, schema version {found}; start-up (or `opsgate migrate`) "
            f"brings it to {SCHEMA_VERSION}",
        )


def _slack_client(settings: Settings) -> AsyncWebClient:
    return AsyncWebClient(
        token=settings.slack_bot_token.get_secret_value(), base_url=settings.slack_api_url
    )


async def _check_slack(settings: Settings, report: Report) -> bool:
    """auth.test; True when Slack accepted the token."""
    try:
        auth = await _slack_client(settings).auth_test()
        report(True, f"slack: signed in as {auth.get('user')} in team {auth.get('team')}")
        return True
    except SlackApiError as exc:
        report(False, str(SignInRefused.auth(str(exc.response.get("error")))))
    except Exception as exc:
        report(False, slack_unreachable(settings.slack_api_url, exc))
    return False


async def _check_socket_mode(settings: Settings, report: Report) -> None:
    """Socket Mode connects with the `xapp-` token: `apps.connections.open` proves it works
    (the WebSocket URL it returns is single-use and simply not used)."""
    if settings.slack_app_token is None:
        return  # `load_settings` already said so for Socket Mode
    client = AsyncWebClient(base_url=settings.slack_api_url)
    try:
        await client.apps_connections_open(app_token=settings.slack_app_token.get_secret_value())
        report(True, "slack: the app-level token opens a Socket Mode connection")
    except SlackApiError as exc:
        report(False, str(SignInRefused.connections(str(exc.response.get("error")))))
    except Exception as exc:
        report(False, slack_unreachable(settings.slack_api_url, exc))


async def _check_llm(
    settings: Settings, report: Report, warn: Callable[[str], None], *, tools: bool
) -> None:
    """Ask the chat client itself: `bot` never builds a request to the LLM; agent_core does.
    Then the context window start-up would use, and whether the server ignores tools."""
    if not settings.opsgate_model:
        report(False, "llm: OPSGATE_MODEL is not set")
        return
    async with httpx.AsyncClient(timeout=httpx.Timeout(10.0)) as llm_http:
        client = OpenAIChatClient(
            llm_http,
            model=settings.opsgate_model,
            base_url=settings.openai_base_url,
            api_key=settings.openai_api_key.get_secret_value() or None,
        )
        try:
            report(True, f"llm: {await client.check()}")
        except ProviderError as exc:
            refused = exc.status_code in (401, 403)
            report(False, f"llm: {exc}" + ("; check OPENAI_API_KEY" if refused else ""))
            return
        except ChatClientError as exc:
            report(False, f"llm: {exc}; check OPENAI_BASE_URL")
            return
        tokens, source = await resolve_context_window(
            settings.opsgate_model, configured=settings.opsgate_context_tokens, probe=client
        )
        report(True, f"llm: context window {tokens:,} tokens (from {source})")
        if await client.template_supports_tools() is False:
            warn(f"llm: {TEMPLATE_WARNING}")
        if tools:
            await _check_tool_calls(client, report)


async def _check_tool_calls(client: OpenAIChatClient, report: Report) -> None:
    try:
        calls = await client.answers_with_tool_calls()
    except ChatClientError as exc:
        report(False, f"llm: the tool-call probe failed: {exc}")
        return
    if calls:
        report(True, "llm: the model answers a request for a tool with a tool call")
    else:
        report(
            False,
            "llm: the model answered a request for a tool call in plain words, with no tool "
            "call: the server's chat template most likely has no tool support, so it ignores "
            "tools and the bot only chats (llama.cpp: --jinja with a chat template that "
            "handles tools; Ollama, LM Studio: a model whose template supports tools)",
        )


_GROUP = "S"


def program_warnings(policy: Policy, path: str | None = None) -> list[str]:
    """Each `run_command` rule whose program (its prefix's first word) is on no directory of
    `path` (default: this process's PATH, which `run_command` passes on)."""
    search = path if path is not None else os.environ.get("PATH", os.defpath)
    found = []
    section = policy.tools.get("run_command")
    for index, rule in enumerate(section.rules if section is not None else ()):
        if not rule.prefix:
            continue
        program = rule.prefix[0]
        if "/" in program:
            present = os.access(program, os.X_OK)
        else:
            present = shutil.which(program, path=search) is not None
        if not present:
            found.append(
                f"policy: tools.run_command.rules[{index}] names the program {program!r}, "
                "which is on no PATH the tools use: the rule matches nothing that can run here"
            )
    return found


def _approvers(policy: Policy) -> Iterator[tuple[str, str]]:
    """(where, id) of every approver the file names."""
    defaults = policy.defaults
    for key in ("approvers", "freeze_admins", "break_glass_approvers"):
        for who in getattr(defaults, key):
            yield f"defaults.{key}", who
    for channel, section in policy.channels_policy.items():
        for who in section.approvers or ():
            yield f"channels_policy.{channel}.approvers", who
    for tool, config in policy.tools.items():
        for index, rule in enumerate(config.rules):
            for who in rule.approvers or ():
                yield f"tools.{tool}.rules[{index}].approvers", who


def _channels(policy: Policy) -> Iterator[tuple[str, str]]:
    for channel in policy.defaults.channels or ():
        yield "defaults.channels", channel
    for channel in policy.channels_policy:
        yield f"channels_policy.{channel}", channel
    for index, freeze in enumerate(policy.freezes):
        for channel in freeze.channels or ():
            yield f"freezes[{index}].channels", channel


async def slack_warnings(policy: Policy, client: AsyncWebClient) -> list[str]:
    """Each approver that is no user or group Slack knows (or a deactivated user), and each
    channel the policy names that Slack does not know or the bot is not in."""
    found = []
    seen: dict[str, str | None] = {}
    for where, who in _approvers(policy):
        if who not in seen:
            seen[who] = await _approver_problem(client, who)
        if seen[who] is not None:
            found.append(f"policy: {where}: {who!r} {seen[who]}: nobody can approve as it")
    checked: dict[str, str | None] = {}
    for where, channel in _channels(policy):
        if channel not in checked:
            checked[channel] = await _channel_problem(client, channel)
        if checked[channel] is not None:
            found.append(f"policy: {where}: channel {channel!r} {checked[channel]}")
    return found


async def _approver_problem(client: AsyncWebClient, who: str) -> str | None:
    try:
        if who.startswith(_GROUP):
            await client.usergroups_users_list(usergroup=who)
            return None
        user = (await client.users_info(user=who)).get("user") or {}
    except SlackApiError as exc:
        return f"is no {'user group' if who.startswith(_GROUP) else 'user'} Slack knows " + (
            f"({exc.response.get('error')})"
        )
    return "is a deactivated user" if user.get("deleted") else None


async def _channel_problem(client: AsyncWebClient, channel: str) -> str | None:
    try:
        info = (await client.conversations_info(channel=channel)).get("channel") or {}
    except SlackApiError as exc:
        return f"is not one Slack shows the bot ({exc.response.get('error')})"
    if info.get("is_member") is False:
        return "is one the bot is not in: invite it (`/invite @OpsGate`)"
    return None
