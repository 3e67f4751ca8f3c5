"""Who and where in the local workspace: its team, its three people, its channels and the bot;
and the policy it runs when none is given, which names them.

The ids look like Slack's (U…, C…, D…) because every part of the bot reads them as Slack ids;
the default policy (`default_policy.toml`, below) names the same ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..policy import Policy

__all__ = [
    "ALERT_BOT",
    "BOT",
    "CHANNELS",
    "DEFAULT_POLICY_NAME",
    "PEOPLE",
    "TEAM",
    "Channel",
    "Person",
    "PolicyText",
    "channel_by_id",
    "channel_named",
    "default_policy_text",
    "dm_of",
    "person",
    "workspace_policy",
]

TEAM = "T0LOCAL"
TEAM_NAME = "OpsGate local"


@dataclass(frozen=True)
class Person:
    """One local user: the page's switcher offers each."""

    user_id: str
    name: str
    role: str
    """What the default policy makes of them: "requester" or "approver"."""


@dataclass(frozen=True)
class Channel:
    """A conversation in the sidebar; `name` is its `data-channel` on the page."""

    channel_id: str
    name: str
    label: str
    kind: str
    """Slack's `channel_type`: "channel" or "im"."""


@dataclass(frozen=True)
class Bot:
    user_id: str
    bot_id: str
    app_id: str
    name: str


BOT = Bot(user_id="U0OPSGATE", bot_id="B0OPSGATE", app_id="A0OPSGATE", name="OpsGate")
ALERT_BOT = Bot(user_id="U0ALERTS", bot_id="B0ALERTS", app_id="A0ALERTS", name="Alertmanager")
"""The alert integration whose messages `#alerts` allow-lists."""

PEOPLE = (
    Person("U0RILEY", "Riley", "requester"),
    Person("U0SAM", "Sam", "approver"),
    Person("U0ALEX", "Alex", "approver"),
)

CHANNELS = (
    Channel("C0OPS", "ops", "#ops", "channel"),
    Channel("C0ALERTS", "alerts", "#alerts", "channel"),
)
"""The shared channels; each person also has a DM with the bot (`dm_of`)."""


def person(user_id: str) -> Person | None:
    return next((p for p in PEOPLE if p.user_id == user_id), None)


def channel_named(name: str) -> Channel | None:
    return next((c for c in CHANNELS if c.name == name), None)


def dm_of(user_id: str) -> Channel:
    """The person's DM with the bot: a channel of its own per person, as in Slack."""
    return Channel("D" + user_id.removeprefix("U"), "dm", "OpsGate", "im")


def channel_by_id(channel_id: str) -> Channel | None:
    found = next((c for c in CHANNELS if c.channel_id == channel_id), None)
    if found is None and channel_id.startswith("D"):
        owner = person("U" + channel_id.removeprefix("D"))
        return dm_of(owner.user_id) if owner else None
    return found


# -- the default policy --------------------------------------------------------------------------
# The policy the workspace runs when none is given (default_policy.toml, package data), written
# for the ids above: free reads, a card for anything else, two approvers for rm and kubectl
# delete (with a preview of what an rm would remove), rm -rf / forbidden, an "Allow for" window,
# and #alerts as an alert channel. Its page explains any command through policy explain's text,
# which the command that serves the workspace hands over (Page(explain=...)).

DEFAULT_POLICY_NAME = "default_policy.toml"


@dataclass(frozen=True)
class PolicyText:
    """The policy the workspace runs, as its page shows it."""

    source: str
    text: str
    built_in: bool


def default_policy_text() -> str:
    return resources.files(__package__).joinpath(DEFAULT_POLICY_NAME).read_text(encoding="utf-8")


def workspace_policy(path: Path | None) -> tuple[Policy, PolicyText]:
    """The policy file given (`OPSGATE_POLICY`, `./opsgate.toml`), else the built-in one."""
    if path is not None:
        text = path.read_text(encoding="utf-8")
        return Policy.load(path), PolicyText(str(path), text, built_in=False)
    text = default_policy_text()
    source = f"built-in {DEFAULT_POLICY_NAME}"
    return Policy.from_toml(text, source=source), PolicyText(source, text, built_in=True)
