"""`opsgate policy replay` and `opsgate policy diff` over a ledger the run service's store calls
wrote (a pause with its cards, an "Allow for" with its allowance, calls that ran freely), on
SQLite and on PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from agent_core import ChatMessage, ToolApprovalRequest, ToolCall, call_digest
from bot.allowances import dump_shape, shape_of
from bot.cli import main
from bot.policy import Policy
from bot.store import AllowanceGrant, Store, open_store
from tests.support.postgres import postgres_cluster, postgres_url
from tests.support.store_helpers import begin_run

__all__ = ["postgres_cluster", "postgres_url"]

CURRENT = """
[tools.run_command]
approval = "rules"

[[tools.run_command.rules]]
prefix = ["rm"]
approval = "forbidden"

[[tools.run_command.rules]]
prefix = ["kubectl", "get"]
allow_for = "4h"
allow_prefix = ["kubectl", "get", "pods"]

[[tools.run_command.rules]]
prefix = ["kubectl", "delete"]
required_approvals = 2
approvers = ["U0AAAAAA1", "U0AAAAAA2", "U0AAAAAA3"]

[[tools.run_command.rules]]
prefix = ["ls"]
approval = "never"
"""

NO_FORBIDDEN = CURRENT.replace('prefix = ["rm"]\napproval = "forbidden"', 'prefix = ["rm"]')
WIDER_ALLOW = CURRENT.replace(
    'allow_prefix = ["kubectl", "get", "pods"]', 'allow_prefix = ["kubectl", "get"]'
)
ONE_APPROVAL = CURRENT.replace("required_approvals = 2", "required_approvals = 1")
ADDED_RULE = (
    CURRENT + '\n[[tools.run_command.rules]]\nprefix = ["ls", "/etc"]\napproval = "always"\n'
)

USER = "U0REQUEST"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.processes)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "opsgate.db")
    url: str = request.getfixturevalue("postgres_url")
    return url


class Ledger:
    """Writes calls as a run does: the assistant message, then a pause (gated calls) or the
    execution (free ones)."""

    def __init__(self, store: Store, policy: Policy) -> None:
        self.store = store
        self.policy = policy
        self.threads = 0
        self.ids: dict[str, str] = {}

    async def _session(self, command: str) -> tuple[str, ToolCall]:
        self.threads += 1
        session = await self.store.get_or_create_session("T1", "C0OPS", f"17000.{self.threads}")
        await self.store.set_requester(session.id, USER)
        assert await begin_run(self.store, session.id)
        await self.store.append_messages(session.id, [ChatMessage.user(f"please {command}")])
        return session.id, ToolCall(
            id=f"call_{self.threads}",
            name="run_command",
            arguments=json.dumps({"command": command}),
        )

    async def ran(self, command: str) -> None:
        session, call = await self._session(command)
        await self.store.append_messages(session, [ChatMessage.assistant("", (call,))])
        await self.store.start_tool_call(session, call)
        await self.store.finish_tool_call(
            session, call, ChatMessage.tool(call.id, "ok"), is_error=False
        )
        found = await self.store.find_call(session, call.id)
        assert found is not None
        self.ids[command] = found.id

    async def paused(self, command: str, *, allow: bool = False) -> None:
        session, call = await self._session(command)
        arguments = call.parsed_arguments()
        request = ToolApprovalRequest(
            call.id, call.name, arguments, "run", call_digest(call.name, arguments)
        )
        await self.store.record_pause(session, ChatMessage.assistant("", (call,)), [request], [])
        row = await self.store.find_call(session, call.id)
        assert row is not None
        self.ids[command] = row.id
        if allow:
            decision = self.policy.decide("run_command", call)
            shape = shape_of("run_command", arguments, decision)
            assert shape is not None
            grant = AllowanceGrant(
                channel_id="C0OPS",
                tool="run_command",
                shape=dump_shape(shape),
                label=shape.label("run_command"),
                expires_at=datetime.now(UTC) + timedelta(hours=4),
            )
            outcome = await self.store.allow_call(row.id, grant, user_id="U0AAAAAA1")
            assert outcome.allowance is not None


async def _record(database: str, policy: Policy) -> dict[str, str]:
    async with open_store(database) as store:
        ledger = Ledger(store, policy)
        await ledger.paused("rm -rf /tmp/cache")
        await ledger.paused("kubectl get pods -n web", allow=True)
        await ledger.ran("kubectl get pods -n db")  # covered by the allowance
        await ledger.paused("kubectl get services -n web")
        await ledger.paused("kubectl delete pod web-1")
        await ledger.ran("ls /etc")
        await ledger.ran("ls /tmp")
        return ledger.ids


@pytest.fixture
def recorded(
    database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[dict[str, str]]:
    monkeypatch.chdir(tmp_path)
    current = tmp_path / "current.toml"
    current.write_text(CURRENT)
    monkeypatch.setenv("OPSGATE_POLICY", str(current))
    monkeypatch.setenv("OPSGATE_DB", database)
    yield asyncio.run(_record(database, Policy.from_toml(CURRENT)))


def _replay(
    tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str], *flags: str
) -> tuple[int, dict[str, Any]]:
    new = tmp_path / "new.toml"
    new.write_text(text)
    code = main(["policy", "replay", str(new), "--json", *flags])
    return code, json.loads(capsys.readouterr().out)


def _ids(items: list[dict[str, Any]]) -> set[str]:
    return {item["call_id"] for item in items}


def test_the_same_policy_changes_nothing(
    recorded: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, found = _replay(tmp_path, CURRENT, capsys, "--fail-on-loosen")
    assert (code, found) == (0, {"calls": 7, "looser": [], "tighter": []})


def test_deleting_a_forbidden_rule_is_looser(
    recorded: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, found = _replay(tmp_path, NO_FORBIDDEN, capsys, "--fail-on-loosen")
    assert code == 1
    assert _ids(found["looser"]) == {recorded["rm -rf /tmp/cache"]}
    assert found["tighter"] == []
    item = found["looser"][0]
    assert item["tool"] == "run_command"
    assert datetime.fromisoformat(item["at"]) <= datetime.now(UTC)
    assert item["before"] == {
        "verdict": "forbidden",
        "rule": "tools.run_command.rules[0]",
        "approvers": [],
        "required": 0,
    }
    assert item["after"] == {
        "verdict": "approval",
        "rule": "tools.run_command.rules[0]",
        "approvers": ["anyone"],
        "required": 1,
    }


def test_widening_an_allow_prefix_is_looser(
    recorded: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, found = _replay(tmp_path, WIDER_ALLOW, capsys, "--fail-on-loosen")
    assert code == 1
    assert _ids(found["looser"]) == {recorded["kubectl get services -n web"]}
    (item,) = found["looser"]
    assert (item["before"]["verdict"], item["after"]["verdict"]) == ("approval", "allowance")


def test_dropping_a_quorum_is_looser(
    recorded: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, found = _replay(tmp_path, ONE_APPROVAL, capsys, "--fail-on-loosen")
    assert code == 1
    assert _ids(found["looser"]) == {recorded["kubectl delete pod web-1"]}
    (item,) = found["looser"]
    assert (item["before"]["required"], item["after"]["required"]) == (2, 1)
    assert item["after"]["approvers"] == ["U0AAAAAA1", "U0AAAAAA2", "U0AAAAAA3"]


def test_adding_a_rule_is_tighter_and_passes(
    recorded: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, found = _replay(tmp_path, ADDED_RULE, capsys, "--fail-on-loosen")
    assert code == 0
    assert found["looser"] == []
    assert _ids(found["tighter"]) == {recorded["ls /etc"]}
    (item,) = found["tighter"]
    assert (item["before"]["verdict"], item["after"]["verdict"]) == ("free", "approval")
    assert item["after"]["rule"] == "tools.run_command.rules[4]"
    new = tmp_path / "new.toml"
    assert main(["policy", "replay", str(new)]) == 0
    text = capsys.readouterr().out
    assert "looser: 0 calls" in text
    assert "tighter: 1 call\n  tools.run_command.rules[4]: 1 call" in text
    assert "run_command ls /etc: runs without approval -> needs 1 approval from anyone" in text


def test_a_new_policy_that_does_not_load_exits_2_naming_the_key(
    recorded: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    new = tmp_path / "broken.toml"
    new.write_text(CURRENT.replace("required_approvals = 2", "required_aprovals = 2"))
    assert main(["policy", "replay", str(new), "--fail-on-loosen"]) == 2
    err = capsys.readouterr().err
    assert "required_aprovals" in err
    assert str(new) in err


def test_against_names_the_policy_compared_with(
    recorded: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = tmp_path / "old.toml"
    old.write_text(ONE_APPROVAL)
    new = tmp_path / "new.toml"
    new.write_text(CURRENT)
    assert main(["policy", "replay", str(new), "--against", str(old), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert _ids(found["tighter"]) == {recorded["kubectl delete pod web-1"]}


def test_diff_names_the_rules_in_explains_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    old, new = tmp_path / "old.toml", tmp_path / "new.toml"
    old.write_text(CURRENT)
    new.write_text(
        NO_FORBIDDEN.replace("required_approvals = 2", "required_approvals = 1")
        + '\n[[tools.run_command.rules]]\nprefix = ["git", "push"]\napproval = "forbidden"\n'
    )
    assert main(["policy", "diff", str(old), str(new)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1:] == [
        "changed tools.run_command.rules[0] (rm …): forbidden -> needs approval",
        "changed tools.run_command.rules[2] (kubectl delete …): needs 2 approvals -> "
        "needs approval; required_approvals 2 -> 1",
        "added tools.run_command.rules[4] (git push …): forbidden",
    ]
