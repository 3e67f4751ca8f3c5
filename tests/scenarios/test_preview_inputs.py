"""A preview binds the files it read, end to end: signed requests into the real Bolt app, the Slack
Web API and LLM stand-ins, the real SQLite file and real processes, with a stand-in `kubectl` on
PATH (`diff -f` prints each file, `apply -f` records what it applied)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from bot.policy import Policy
from tests.scenarios.test_app import ALICE, BOB, make_tools, tool_messages
from tests.support.harness import Bot, running_bot, texts

KUBECTL = """#!/bin/sh
# A kubectl stand-in: `diff -f A -f B` shows each file, `apply -f A ...` records them.
verb=$1; shift
while [ $# -gt 0 ]; do
  if [ "$1" = -f ]; then
    if [ "$verb" = diff ]; then echo "--- $2"; cat "$2"
    else cat "$2" >> "$(dirname "$0")/applied"; fi
    shift
  fi
  shift
done
"""


def _policy(workdir: Path) -> Policy:
    return Policy.from_toml(
        f'[tools.run_command]\napproval = "rules"\nworkdir = "{workdir}"\n'
        '[[tools.run_command.rules]]\nprefix = ["kubectl", "apply"]\n'
        'preview = "kubectl diff -f {arg:-f}"\n'
        '[[tools.run_command.rules]]\nprefix = ["cp"]\napproval = "never"\n'
    )


@pytest.fixture
def kubectl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in's directory, first on PATH; `applied` there is what `apply` applied."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "kubectl"
    script.write_text(KUBECTL)
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path('/usr/bin')}:{Path('/bin')}")
    return bin_dir


def _card_text(card: dict[str, Any]) -> str:
    blocks = card["params"]["blocks"]
    return json.dumps(json.loads(blocks) if isinstance(blocks, str) else blocks, ensure_ascii=False)


async def _audit(bot: Bot, event: str) -> list[dict[str, Any]]:
    return [dict(a.details) for a in await bot.deps.store.audit_rows() if a.event == event]


async def test_every_file_is_previewed_and_its_digest_bound(tmp_path: Path, kubectl: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "web.yaml").write_text("kind: Deployment\n")
    (work / "evil.yaml").write_text("kind: ClusterRoleBinding\n")
    async with running_bot(tmp_path, tools=make_tools(work), policy=_policy(work)) as bot:
        command = "kubectl apply -f web.yaml -f evil.yaml"
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": command})])
        await bot.mention("apply both", user=ALICE)
        [card] = await bot.wait_cards(1)
        shown = _card_text(card)
        assert "kind: Deployment" in shown and "kind: ClusterRoleBinding" in shown
        for name in ("web.yaml", "evil.yaml"):
            digest = hashlib.sha256((work / name).read_bytes()).hexdigest()
            assert f"`{name}` sha256 `{digest[:16]}`" in shown
        [ran] = await _audit(bot, "preview")
        assert ran["argv"] == ["kubectl", "diff", "-f", "web.yaml", "-f", "evil.yaml"]
        assert [(i["path"], i["state"]) for i in ran["inputs"]] == [
            ("web.yaml", "file"),
            ("evil.yaml", "file"),
        ]

        bot.llm.reply_text("Applied.")
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        applied = (kubectl / "applied").read_text()
        assert applied == "kind: Deployment\nkind: ClusterRoleBinding\n"  # unchanged: it ran


async def test_a_file_a_sibling_call_rewrote_refuses_the_approved_call(
    tmp_path: Path, kubectl: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "web.yaml").write_text("kind: Deployment\nreplicas: 3\n")
    (work / "evil.yaml").write_text("kind: ClusterRoleBinding\nsubjects: everyone\n")
    async with running_bot(tmp_path, tools=make_tools(work), policy=_policy(work)) as bot:
        bot.llm.reply_tool_calls(
            [
                ("call_1", "run_command", {"command": "cp evil.yaml web.yaml"}),  # no card
                ("call_2", "run_command", {"command": "kubectl apply -f web.yaml"}),
            ]
        )
        await bot.mention("apply web", user=ALICE)
        [card] = await bot.wait_cards(1)
        assert "replicas: 3" in _card_text(card) and "ClusterRoleBinding" not in _card_text(card)

        bot.llm.reply_text("It changed.")
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()

        assert (work / "web.yaml").read_text().startswith("kind: ClusterRoleBinding")  # cp ran
        assert not (kubectl / "applied").exists(), "nothing was applied"
        cp, apply = tool_messages(bot.llm.requests[1])
        assert cp["content"].startswith("exit code: 0")
        assert apply["content"].startswith("Error: the file changed since the preview: 'web.yaml'")
        assert any("the file changed since the preview" in text for text in texts(bot.slack))
        [refusal] = [r for r in await _audit(bot, "refusal") if r.get("action") == "execute"]
        assert refusal["why"] == "preview_input_changed" and refusal["changed"] == ["web.yaml"]
        assert refusal["ledger_id"] == card["ledger_id"]
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.is_error is True


async def test_a_file_that_appears_after_the_preview_refuses_the_call(
    tmp_path: Path, kubectl: Path
) -> None:
    """Absent at preview time (the preview failed on it) is bound too: a sibling creating it
    before the run must not slip it in unseen."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "evil.yaml").write_text("kind: ClusterRoleBinding\n")
    async with running_bot(tmp_path, tools=make_tools(work), policy=_policy(work)) as bot:
        bot.llm.reply_tool_calls(
            [
                ("call_1", "run_command", {"command": "cp evil.yaml new.yaml"}),
                ("call_2", "run_command", {"command": "kubectl apply -f new.yaml"}),
            ]
        )
        await bot.mention("apply new", user=ALICE)
        [card] = await bot.wait_cards(1)
        assert "no such file: the run refuses if one appears" in _card_text(card)
        bot.llm.reply_text("It appeared.")
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert not (kubectl / "applied").exists()
        _, apply = tool_messages(bot.llm.requests[1])
        assert "the file changed since the preview: 'new.yaml'" in apply["content"]
