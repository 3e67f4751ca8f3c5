"""The one exception tree of the `bot` package: catch `BotError` for anything the bot raises.

Every error the bot raises on purpose is a `BotError`, so a caller (the CLI) can turn any of
them into one line. Its branches are here, each where its package re-exports it, except the
store's, which is the store's own (`bot.store.errors`):

    BotError
     ├── SettingsError            a setting is missing or malformed (bot.settings)
     ├── PolicyError              the policy file is wrong (bot.policy)
     ├── ToolLoadError            a `tools_modules` entry cannot be loaded (bot.tools)
     ├── ToolEnvironmentError     a tool's `env` names an unset `${VAR}` (bot.tools)
     ├── RunAsError               `run_as` names an unusable user (bot.tools)
     ├── ShellMissing             the shell that runs commands is missing (bot.tools)
     ├── McpServerError           an MCP tool server (bot.tools.mcp)
     │    ├── McpConfigError
     │    └── McpStartError
     ├── ObservabilityError       logging or the health server (bot.observability)
     │    ├── LogSettingError
     │    └── HealthServerError
     ├── PlaneError               the approval plane (bot.plane)
     │    ├── BadRequest
     │    ├── ReceiptInvalid
     │    ├── NotOpened
     │    └── PlaneClientError
     ├── ExplainError, ReplayError, McpToolsError    a command's arguments (bot.cli)
     ├── SignInRefused            Slack refused a token at start-up (bot.slack.signin)
     └── StoreError               the database (bot.store.errors)
          ├── DatabaseLocked
          ├── DatabaseUnwritable
          ├── SchemaTooNew
          ├── InvalidTransition
          ├── UnknownSession
          └── UnknownCall

Errors of the agent loop itself are `agent_core.AgentCoreError`s.
"""

from __future__ import annotations

__all__ = [
    "BadRequest",
    "BotError",
    "ExplainError",
    "HealthServerError",
    "LogSettingError",
    "McpConfigError",
    "McpServerError",
    "McpStartError",
    "McpToolsError",
    "NotOpened",
    "ObservabilityError",
    "PlaneClientError",
    "PlaneError",
    "PolicyError",
    "ReceiptInvalid",
    "ReplayError",
    "RunAsError",
    "SettingsError",
    "ShellMissing",
    "ToolEnvironmentError",
    "ToolLoadError",
]


class BotError(Exception):
    """Base of every error the bot raises on purpose."""


class SettingsError(BotError):
    """A setting is missing or malformed. The message is one line: what, and where to get it.

    It never contains a secret's value, so it is safe to print and to log.
    """


class PolicyError(BotError):
    """The policy file is unusable. The message names the file and what is wrong with it."""


class ToolLoadError(BotError):
    """A custom tool could not be loaded: bad path, failed import, or not an agent_core tool."""


class ToolEnvironmentError(BotError):
    """A tool's `env` uses a `${VAR}` the bot's environment does not set."""


class RunAsError(BotError):
    """`run_as` names a user that does not exist, or one the bot cannot switch to."""


class ShellMissing(BotError):
    """The shell that runs commands is not there, or cannot be executed."""


class McpServerError(BotError):
    """Base of the errors about MCP tool servers. Messages name the server (and tool)."""


class McpConfigError(McpServerError):
    """The `[mcp_servers]` settings cannot be used: a missing `${VAR}`, an invalid tool name."""


class McpStartError(McpServerError):
    """A server did not start: missing command, failed handshake, unreachable URL, timeout."""


class ObservabilityError(BotError):
    """Base of every error `bot.observability` raises on purpose. Messages are one line."""


class LogSettingError(ObservabilityError, ValueError):
    """`OPSGATE_LOG_FORMAT` or `OPSGATE_LOG_LEVEL` has a value we do not know."""


class HealthServerError(ObservabilityError, OSError):
    """The health and metrics server could not listen (the port is taken, or not ours)."""


class PlaneError(BotError):
    """Something of the approval plane failed."""


class BadRequest(PlaneError):
    """A request body the API refuses (400); `field` names what is wrong."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field!r}: {problem}")
        self.field = field
        self.problem = problem


class ReceiptInvalid(PlaneError):
    """A receipt that does not prove an approval of this command: the message says why."""


class NotOpened(PlaneError):
    """A request that needs a person whose thread Slack refused (it is tried again)."""


class PlaneClientError(PlaneError):
    """The API could not be reached, or refused the request (`status`, when it answered)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ExplainError(BotError):
    """The arguments given to `opsgate policy explain` cannot be read."""


class ReplayError(BotError):
    """`opsgate policy replay` cannot run: its window, or the ledger, cannot be read."""


class McpToolsError(BotError):
    """`opsgate mcp tools` cannot read the database."""


class SignInRefused(BotError):
    """Slack refused a token at start-up; the message is `opsgate check`'s line for it. The
    words are here, Slack-free, so that `opsgate check` says them without loading Bolt."""

    @classmethod
    def auth(cls, error: str) -> SignInRefused:
        """A bot token `auth.test` rejects."""
        return cls(f"slack: auth.test said {error!r}; check SLACK_BOT_TOKEN")

    @classmethod
    def connections(cls, error: str) -> SignInRefused:
        """An app-level token `apps.connections.open` rejects."""
        return cls(f"slack: apps.connections.open said {error!r}; check SLACK_APP_TOKEN")


def slack_unreachable(url: str, exc: BaseException) -> str:
    """What `opsgate check` and a waiting start say of a Slack they cannot reach."""
    return f"slack: cannot reach {url} ({type(exc).__name__})"
