"""The preview on a card: first lines only with a note for the rest, untrusted output
escaped, "preview failed" with Approve kept, and the minimal card keeps it (Approve binds to it)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from bot.runs.views import CardCall, CardPreview
from bot.slack.cards import approval_card, minimal_blocks
from bot.slack.ids import shown_digest, shown_preview_digest

NOW = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
DIGEST = "ab" * 32


def _call(output: str, *, failed: str | None = None) -> CardCall:
    preview = CardPreview(
        "kubectl diff -f web.yaml", output, 1 if failed else 0, failed, NOW, DIGEST
    )
    return CardCall(
        ledger_id="led_1",
        tool="run_command",
        description="",
        arguments={"command": "kubectl apply -f web.yaml"},
        digest="3f2a9c0d1e7b",
        requested_by="U0ALICE",
        preview=preview,
    )


def _buttons(blocks: list[dict[str, Any]]) -> list[str]:
    return [e["text"]["text"] for b in blocks if b["type"] == "actions" for e in b["elements"]]


def test_first_lines_then_a_note_and_both_digests_on_the_buttons() -> None:
    output = "".join(f"line {n}\n" for n in range(1, 51))
    blocks = approval_card(_call(output))
    shown = json.dumps(blocks)
    assert "line 20" in shown and "line 21" not in shown
    assert "30 more lines of the preview cut" in shown
    assert "ran 2026-12-04 09:00:00 UTC" in shown and "exit 0" in shown
    [actions] = [b for b in blocks if b["type"] == "actions"]
    assert shown_digest(actions["block_id"]) == "3f2a9c0d1e7b"
    assert shown_preview_digest(actions["block_id"]) == DIGEST
    assert "Re-run preview" in _buttons(blocks)
    # Pinned: a new label never says approve, reject or cancel.
    [label] = [b for b in _buttons(blocks) if "preview" in b.lower()]
    assert not any(w in label.lower() for w in ("approve", "reject", "cancel"))


def test_the_output_is_untrusted_text() -> None:
    shown = json.dumps(approval_card(_call("<!channel> *bold* ```fence\n")))
    assert "<!channel>" not in shown and "&lt;!channel&gt;" in shown


def test_a_failed_preview_keeps_approve_with_its_warning() -> None:
    blocks = approval_card(_call("- replicas: 3\n+ replicas: 30\n", failed="exit status 1"))
    shown = json.dumps(blocks)
    assert "*preview failed* (exit status 1)" in shown and "replicas: 30" in shown
    assert _buttons(blocks)[0] == "Approve"


def test_the_minimal_card_keeps_the_preview() -> None:
    blocks = minimal_blocks(_call("replicas: 3\n"), "args.txt")
    shown = json.dumps(blocks)
    assert "replicas: 3" in shown and "Re-run preview" in _buttons(blocks)


def test_the_files_read_are_listed_with_their_digests() -> None:
    preview = CardPreview(
        "kubectl diff -f web.yaml -f new.yaml",
        "diff\n",
        0,
        None,
        NOW,
        DIGEST,
        inputs=(("web.yaml", "file", "cd" * 32), ("new.yaml", "absent", None)),
    )
    shown = json.dumps(approval_card(replace(_call("x"), preview=preview)))
    assert "Files read, bound to Approve (the run refuses if one changes)" in shown
    assert f"`web.yaml` sha256 `{'cd' * 8}`" in shown
    assert "`new.yaml` no such file: the run refuses if one appears" in shown
