"""Previews on the card, bound to the approval, end to end: signed requests into the
real Bolt app, the Slack Web API and LLM stand-ins, real preview commands (`cat` of a file the
test changes) and the real SQLite file, with an injected clock for the preview's age."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bot.policy import Policy
from bot.slack.ids import ACTION_FIELD, ACTION_RERUN_PREVIEW, CALLBACK_EDIT
from bot.tools.preview import bound_digest, read_inputs
from tests.scenarios.test_app import ALICE, BOB, CAROL, make_tools
from tests.scenarios.test_home_and_allowances import _open_home
from tests.support.harness import Bot, running_bot
from tests.support.slack_requests import interaction_body, view_submission

SRE1, SRE2 = "U0SRE1", "U0SRE2"


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


POLICY = (
    '[tools.run_command]\napproval = "rules"\n'
    '[[tools.run_command.rules]]\nprefix = ["kubectl", "apply"]\n'
    'preview = "cat {arg:-f}"\njustification = "Applying changes the cluster."\n'
)


def bound(manifest: Path) -> str:
    """The digest a `cat {arg:-f}` preview of `manifest` binds: its output and the file."""
    output = hashlib.sha256(manifest.read_bytes()).hexdigest()
    return bound_digest(output, read_inputs([str(manifest)], ("cat", str(manifest)), Path("/")))


def _policy(extra: str = "") -> Policy:
    return Policy.from_toml(POLICY + extra)


def _blocks(params: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = params["blocks"]
    return json.loads(blocks) if isinstance(blocks, str) else list(blocks)


def _buttons(blocks: list[dict[str, Any]]) -> list[str]:
    return [e["text"]["text"] for b in blocks if b.get("type") == "actions" for e in b["elements"]]


def _drawn(bot: Bot, ledger_id: str) -> list[dict[str, Any]]:
    """The card as Slack shows it now (after every redraw)."""
    [card] = [c for c in bot.cards() if c["ledger_id"] == ledger_id]
    channel, ts = card["params"]["channel"], None
    updates = [c for c in bot.slack.calls_to("chat.update") if c.params.get("channel") == channel]
    ts = updates[-1].params["ts"] if updates else None
    message = bot.slack.message(channel, ts) if ts else None
    return _blocks(message if message is not None else card["params"])


async def _audit(bot: Bot, event: str) -> list[dict[str, Any]]:
    return [dict(a.details) for a in await bot.deps.store.audit_rows() if a.event == event]


async def _paused(bot: Bot, manifest: Path, ts: str = "1700000001.000100") -> dict[str, Any]:
    command = f"kubectl apply -f {manifest}"
    bot.llm.reply_tool_calls([("call_1", "run_command", {"command": command})])
    await bot.mention("apply it", user=ALICE, ts=ts)
    [card] = await bot.wait_cards(1)
    return card


async def test_the_previews_output_is_on_the_card_and_bound_to_the_decision(
    tmp_path: Path,
) -> None:
    manifest = tmp_path / "app.yaml"
    manifest.write_text("kind: Deployment\nreplicas: 3\n")
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=_policy()) as bot:
        card = await _paused(bot, manifest)
        blocks = _blocks(card["params"])
        shown = json.dumps(blocks, ensure_ascii=False)
        assert "*Preview*" in shown and f"cat {manifest}" in shown and "exit 0" in shown
        assert "replicas: 3" in shown and "preview failed" not in shown
        digest = bound(manifest)
        assert f"preview digest `{digest[:12]}`" in shown  # beside the call's digest
        assert _buttons(blocks) == ["Approve", "Reject", "Edit", "Re-run preview", "Cancel run"]
        [actions] = [b for b in blocks if b["type"] == "actions"]
        assert actions["block_id"].endswith(f".{digest}")  # Approve binds to both digests
        [ran] = await _audit(bot, "preview")
        assert ran["digest"] == digest and ran["exit_status"] == 0 and ran["why"] == "card"
        assert ran["argv"] == ["cat", str(manifest)] and ran["seconds"] >= 0

        bot.llm.reply_text("Applied.")
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [decision] = await _audit(bot, "decision")
        assert decision["preview_digest"] == digest and decision["final"] is True
        assert len(await _audit(bot, "preview")) == 1, "a fresh preview is not run again"


async def test_the_home_tab_offers_no_approve_for_a_previewed_call(tmp_path: Path) -> None:
    manifest = tmp_path / "app.yaml"
    manifest.write_text("replicas: 3\n")
    policy = Policy.from_toml(f'[defaults]\napprovers = ["{BOB}", "{CAROL}"]\n' + POLICY)
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        card = await _paused(bot, manifest)
        home = await _open_home(bot, BOB, 1)  # it cannot show the preview: Reject only
        [actions] = [b for b in home["blocks"] if b.get("type") == "actions"]
        assert _buttons([actions]) == ["Reject"]
        assert actions["elements"][0]["value"] == card["ledger_id"]
        assert "approve or edit it on the card" in json.dumps(home["blocks"])


async def test_a_stale_preview_is_run_again_when_the_last_approval_arrives(
    tmp_path: Path,
) -> None:
    clock = Clock()
    manifest = tmp_path / "app.yaml"
    manifest.write_text("replicas: 3\n")
    policy = _policy('preview_ttl = "5m"\n')
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock) as bot:
        card = await _paused(bot, manifest)
        clock.now += timedelta(minutes=6)  # older than its preview_ttl; the output is the same
        bot.llm.reply_text("Applied.")
        await bot.click("opsgate_approve", card["ledger_id"], user=BOB)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        runs = await _audit(bot, "preview")
        assert [r["why"] for r in runs] == ["card", "stale"]
        assert runs[0]["digest"] == runs[1]["digest"]
        row = await bot.deps.store.get_call(card["ledger_id"])
        assert row is not None and row.status == "done"
        stored = row.preview_run()
        assert stored is not None and stored.ran_at == clock.now


async def test_a_changed_preview_refuses_the_approval_and_resets_the_approvals(
    tmp_path: Path,
) -> None:
    clock = Clock()
    manifest = tmp_path / "app.yaml"
    manifest.write_text("replicas: 3\n")
    policy = _policy(f'approvers = ["{SRE1}", "{SRE2}", "{CAROL}"]\nrequired_approvals = 2\n')
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy, clock=clock) as bot:
        card = await _paused(bot, manifest)
        ledger_id = card["ledger_id"]
        await bot.click("opsgate_approve", ledger_id, user=SRE1)  # one of two: no re-run
        await bot.settle()
        assert [r["why"] for r in await _audit(bot, "preview")] == ["card"]

        clock.now += timedelta(minutes=11)  # past the default preview_ttl (10m)
        manifest.write_text("replicas: 30\n")  # and what it shows has moved
        await bot.click("opsgate_approve", ledger_id, user=SRE2)
        await bot.settle()
        told = bot.slack.calls_to("chat.postEphemeral")[-1].params
        assert told["user"] == SRE2 and "the preview changed: look again" in told["text"]
        row = await bot.deps.store.get_call(ledger_id)
        assert row is not None and row.status == "pending" and row.approvals == ()
        assert len(bot.llm.requests) == 1, "nothing ran"
        stale = (await _audit(bot, "preview"))[-1]
        assert stale["why"] == "stale" and stale["approvals_reset"] == [SRE1]
        [refusal] = [r for r in await _audit(bot, "refusal") if r.get("why") == "preview_changed"]
        assert refusal["ledger_id"] == ledger_id and refusal["policy_rule"].endswith("rules[0]")
        assert refusal["rule"]  # who may decide, as on every refusal row
        redrawn = json.dumps(_drawn(bot, ledger_id), ensure_ascii=False)
        assert "replicas: 30" in redrawn and "0 of 2 approvals" in redrawn

        # On the new preview: two approvals run the call.
        bot.llm.reply_text("Applied.")
        await bot.click("opsgate_approve", ledger_id, user=SRE1)
        await bot.settle()
        await bot.click("opsgate_approve", ledger_id, user=SRE2)
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        final = (await _audit(bot, "decision"))[-1]
        new_digest = bound(manifest)
        assert final["final"] is True and final["preview_digest"] == new_digest


async def test_re_run_preview_redraws_the_card_and_old_cards_no_longer_approve(
    tmp_path: Path,
) -> None:
    manifest = tmp_path / "app.yaml"
    manifest.write_text("replicas: 3\n")
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=_policy()) as bot:
        card = await _paused(bot, manifest)
        ledger_id = card["ledger_id"]
        [old] = [b for b in _blocks(card["params"]) if b["type"] == "actions"]

        await bot.click(ACTION_RERUN_PREVIEW, ledger_id, user=ALICE)  # the requester may not
        await bot.settle()
        assert [r["why"] for r in await _audit(bot, "preview")] == ["card"]
        refused = [r for r in await _audit(bot, "refusal") if r.get("action") == "preview"]
        assert refused and refused[0]["reason"] == "self_approval"

        manifest.write_text("replicas: 5\n")
        await bot.click(ACTION_RERUN_PREVIEW, ledger_id, user=BOB)
        await bot.settle()
        runs = await _audit(bot, "preview")
        assert [r["why"] for r in runs] == ["card", "rerun"] and runs[0]["digest"] != runs[1][
            "digest"
        ]
        redrawn = _drawn(bot, ledger_id)
        assert "replicas: 5" in json.dumps(redrawn) and "Re-run preview" in _buttons(redrawn)

        # A click on the card as it was drawn before (the old preview) counts for nothing.
        await bot.click("opsgate_approve", ledger_id, user=BOB, block_id=old["block_id"])
        await bot.settle()
        row = await bot.deps.store.get_call(ledger_id)
        assert row is not None and row.status == "pending"
        told = bot.slack.calls_to("chat.postEphemeral")[-1].params
        assert "the preview changed: look again" in told["text"]
        bot.llm.reply_text("Applied.")
        await bot.click("opsgate_approve", ledger_id, user=BOB)  # on the redrawn card
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        assert (await _audit(bot, "decision"))[-1]["preview_digest"] == runs[1]["digest"]


async def test_a_placeholder_with_no_value_shows_preview_failed_and_keeps_approve(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=_policy()) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": "kubectl apply -k ."})])
        await bot.mention("apply it", user=ALICE)
        [card] = await bot.wait_cards(1)
        blocks = _blocks(card["params"])
        shown = json.dumps(blocks, ensure_ascii=False)
        assert "*preview failed*" in shown and "no value for {arg:-f} in this command" in shown
        assert _buttons(blocks)[0] == "Approve"
        [ran] = await _audit(bot, "preview")
        assert ran["argv"] == [] and ran["exit_status"] is None and ran["failed"]


async def test_a_previewed_part_after_a_cd_shows_preview_failed_not_the_wrong_file(
    tmp_path: Path,
) -> None:
    """`cd /x && kubectl apply -f web.yaml` applies `/x/web.yaml`: a preview of `web.yaml`
    in the tool's directory would show (and bind) another file. It fails closed instead."""
    (tmp_path / "web.yaml").write_text("kind: Decoy\n")
    (tmp_path / "x").mkdir()
    command = f"cd {tmp_path / 'x'} && kubectl apply -f web.yaml"
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=_policy()) as bot:
        bot.llm.reply_tool_calls([("call_1", "run_command", {"command": command})])
        await bot.mention("apply it", user=ALICE)
        [card] = await bot.wait_cards(1)
        shown = json.dumps(_blocks(card["params"]), ensure_ascii=False)
        assert "*preview failed*" in shown
        assert "the command changes directory before the previewed part" in shown
        assert "Decoy" not in shown
        [ran] = await _audit(bot, "preview")
        assert ran["argv"] == [] and ran["exit_status"] is None and ran["failed"]


def _edit(bot: Bot, ledger_id: str, command: str, user: str) -> Any:
    payload = view_submission(
        CALLBACK_EDIT, ledger_id, {"command": {ACTION_FIELD: command}}, user=user
    )
    return bot.post(interaction_body(payload), "application/x-www-form-urlencoded")


async def test_an_edit_of_a_previewed_call_is_approved_on_the_card_showing_its_preview(
    tmp_path: Path,
) -> None:
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("replicas: 3\n")
    second.write_text("replicas: 9\n")
    policy = _policy('[[tools.run_command.rules]]\nprefix = ["echo"]\n')
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=policy) as bot:
        card = await _paused(bot, first)
        ledger_id = card["ledger_id"]
        await _edit(bot, ledger_id, f"kubectl apply -f {second}", BOB)  # one approval would do
        await bot.settle()
        told = bot.slack.calls_to("chat.postEphemeral")[-1].params
        assert told["user"] == BOB and "approve there" in told["text"]
        row = await bot.deps.store.get_call(ledger_id)
        assert row is not None and row.status == "pending" and row.approvals == ()
        assert len(bot.llm.requests) == 1, "the edit ran nothing"
        runs = await _audit(bot, "preview")
        assert [r["argv"] for r in runs] == [["cat", str(first)], ["cat", str(second)]]
        [edited] = await _audit(bot, "edited")
        assert edited["policy_rule"] == "tools.run_command.rules[0]" and edited["rule"]
        assert edited["approvals"] == 0 and edited["final"] is False
        assert edited["policy_match"] == "kubectl apply …"
        assert "replicas: 9" in json.dumps(_drawn(bot, ledger_id))

        bot.llm.reply_text("Applied.")
        await bot.click("opsgate_approve", ledger_id, user=BOB)  # on the redrawn card
        await bot.llm.wait_for_requests(2)
        await bot.settle()
        [decision] = await _audit(bot, "decision")
        assert decision["preview_digest"] == runs[1]["digest"] and decision["final"] is True

        # An edit of a call without a preview approves it at once, its row naming the rule.
        bot.llm.reply_tool_calls([("call_2", "run_command", {"command": "echo hi"})])
        await bot.mention("say hi", user=ALICE, ts="1700000002.000100")
        cards = await bot.wait_cards(2)
        bot.llm.reply_text("Said.")
        await _edit(bot, cards[-1]["ledger_id"], "echo bye", BOB)
        await bot.llm.wait_for_requests(4)
        await bot.settle()
        edits = await _audit(bot, "edited")
        assert edits[-1]["policy_rule"] == "tools.run_command.rules[1]"
        assert edits[-1]["final"] is True and edits[-1]["approvals"] == 1


async def test_a_long_preview_shows_its_first_lines_and_is_attached_whole(tmp_path: Path) -> None:
    manifest = tmp_path / "app.yaml"
    manifest.write_text("".join(f"line {n}\n" for n in range(1, 31)))
    async with running_bot(tmp_path, tools=make_tools(tmp_path), policy=_policy()) as bot:
        card = await _paused(bot, manifest)
        shown = json.dumps(_blocks(card["params"]), ensure_ascii=False)
        assert "line 20" in shown and "line 21" not in shown
        digest = bound(manifest)
        name = f"preview-call_1-{digest[:12]}.txt"
        assert "10 more lines of the preview cut" in shown and name in shown
        await bot.settle()
        [upload] = [u for u in bot.slack.uploaded_files if u.filename == name]
        assert upload.text == manifest.read_text() and upload.thread_ts == "1700000001.000100"

        # A changed preview gets its own file; an unchanged re-run uploads nothing again.
        await bot.click(ACTION_RERUN_PREVIEW, card["ledger_id"], user=BOB)
        await bot.settle()
        assert len(bot.slack.uploaded_files) == 1
        manifest.write_text("short now\n")
        await bot.click(ACTION_RERUN_PREVIEW, card["ledger_id"], user=BOB)
        await bot.settle()
        assert len(bot.slack.uploaded_files) == 1  # short: the card shows it all
        assert "short now" in json.dumps(_drawn(bot, card["ledger_id"]))
