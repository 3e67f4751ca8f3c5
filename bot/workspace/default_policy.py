"""The policy the local workspace runs when none is given (`default_policy.toml`, package data):
free reads, a card for anything else, two approvers for `rm` and `kubectl delete` (with a
preview of what an `rm` would remove), `rm -rf /` forbidden, an "Allow for" window, and
`#alerts` as an alert channel. Its page explains any command through `policy explain`'s text,
which the command that serves the workspace hands over (`Page(explain=...)`).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..policy import Policy

__all__ = [
    "DEFAULT_POLICY_NAME",
    "PolicyText",
    "default_policy_text",
    "workspace_policy",
]

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
