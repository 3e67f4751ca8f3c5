"""`opsgate check`'s `warn` lines about the policy file's names: a rule's program that is on no
PATH the tools use, an approver Slack does not know, a channel the bot is not in. Warnings,
not failures: a program may be installed later, a channel joined after the check; but each is
a rule that quietly never matches, or an approval nobody can give.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from ..policy import Policy

__all__ = ["program_warnings", "slack_warnings"]

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
