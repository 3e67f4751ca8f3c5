"""The store's errors: one branch of the bot's exception tree, under `bot.errors.BotError`.

Catch `StoreError` for anything a store backend raises on purpose. Every backend raises these
same classes, so callers never import a backend to handle its errors.
"""

from __future__ import annotations

from pathlib import Path

from bot.errors import BotError

__all__ = [
    "DatabaseLocked",
    "DatabaseReplaced",
    "DatabaseUnwritable",
    "InvalidTransition",
    "LateResult",
    "PostgresSchemaTooNew",
    "SchemaTooNew",
    "StoreError",
    "UnknownCall",
    "UnknownSession",
]


class StoreError(BotError):
    """Base of every error raised by `bot.store` (and its backends)."""


class DatabaseLocked(StoreError):
    """Another process holds the database's exclusive lock (`SQLiteStore(..., exclusive=True)`).

    Two bots on one file would each repair the other's in-flight calls at start-up, so the
    second one is refused rather than let a message run twice.
    """

    def __init__(self, path: Path, lock_path: Path, holder: int | None = None) -> None:
        who = f" (pid {holder})" if holder is not None else ""
        super().__init__(
            f"another OpsGate process{who} is using database {str(path)!r} "
            f"(it holds the lock {str(lock_path)!r}); stop it first"
        )
        self.path = path
        self.lock_path = lock_path
        self.holder = holder


class DatabaseUnwritable(StoreError):
    """The database refused the start-up write probe (read-only file, full disk): the bot would
    answer Slack and lose every message and click, so it does not start."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"the database does not take writes, so OpsGate will not start: {cause}")


class DatabaseReplaced(StoreError):
    """The SQLite file the store opened was deleted or replaced under it: its writes would go
    to a file nobody will read again (an unlinked inode), so every write is refused until the
    bot is restarted on the right file."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(
            f"the database file {str(path)!r} {why} since OpsGate opened it: nothing more is "
            "written (it would be lost); restore the file and restart OpsGate"
        )
        self.path = path


class LateResult(StoreError):
    """A tool call finished on a replica that had stalled, after another replica reported it
    interrupted (its lease had lapsed): the result and an audit row were written, the call
    stays `interrupted` (the thread and the model were told so), and this run goes no further."""

    def __init__(self, call_id: str, session_id: str) -> None:
        super().__init__(
            f"tool call {call_id!r} of session {session_id!r} is interrupted, not executing "
            "(another replica reported it while it ran): its late result is audited, the run "
            "goes no further here"
        )
        self.call_id = call_id
        self.session_id = session_id


class SchemaTooNew(StoreError):
    """The file was written by a newer OpsGate; we refuse to touch it rather than guess."""

    def __init__(self, path: Path, found: int, supported: int) -> None:
        super().__init__(
            f"database {str(path)!r} has schema version {found}, but this OpsGate supports "
            f"versions up to {supported}; upgrade OpsGate (the file was left unchanged)"
        )
        self.path = path
        self.found = found
        self.supported = supported


class PostgresSchemaTooNew(SchemaTooNew):
    """The PostgreSQL database was migrated by a newer OpsGate; refuse rather than guess."""

    def __init__(self, url: str, found: int, supported: int) -> None:
        StoreError.__init__(
            self,
            f"database {url!r} has schema version {found}, but this OpsGate supports "
            f"versions up to {supported}; upgrade OpsGate (the database was left unchanged)",
        )
        self.url = url
        self.found = found
        self.supported = supported


class UnknownSession(StoreError):
    """A write named a session id that is not in the store."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session with id {session_id!r}")
        self.session_id = session_id


class UnknownCall(StoreError):
    """A write named a ledger id (or a session's call id) that is not in the store."""

    def __init__(self, call_id: str, session_id: str | None = None) -> None:
        where = f" in session {session_id!r}" if session_id else ""
        super().__init__(f"no tool call {call_id!r}{where} in the ledger")
        self.call_id = call_id
        self.session_id = session_id


class InvalidTransition(StoreError):
    """A named state transition found the session in a state it does not start from.

    Only the unconditional steps raise it (`resume_started`); the conditional ones (`end_run`,
    `claim_resume`, `claim_queued`) answer False (or None) instead, because losing that race is
    normal.
    """

    def __init__(self, session_id: str, found: str, expected: str, to_state: str) -> None:
        super().__init__(
            f"session {session_id!r} is {found}, not {expected}; it cannot become {to_state}"
        )
        self.session_id = session_id
        self.found = found
        self.expected = expected
        self.to_state = to_state
