"""The contract of a call's preview: stored with the call and audited; a run that
changed resets the approvals so far; an approval from a card that showed another preview
digest counts for nothing; decision rows carry the preview digest."""

from __future__ import annotations

from datetime import timedelta

from bot.store import MoreApprovalsNeeded, PreviewChanged, Ruling, Store, StoredPreview

from .helpers import T0, paused_session


def _preview(output: str, digest: str, *, minutes: int = 0) -> StoredPreview:
    return StoredPreview(
        argv=("cat", "app.yaml"),
        output=output,
        exit_status=0,
        failed=None,
        ran_at=T0 + timedelta(minutes=minutes),
        seconds=0.01,
        digest=digest,
    )


async def test_a_preview_is_stored_with_the_call_and_audited(store: Store) -> None:
    _, rows = await paused_session(store)
    row = await store.set_preview(rows[0].id, _preview("replicas: 3\n", "aa"), why="card")
    assert row is not None and row.preview_run() == _preview("replicas: 3\n", "aa")
    again = await store.get_call(rows[0].id)
    assert again is not None and again.preview_run() == _preview("replicas: 3\n", "aa")
    [audited] = [a for a in await store.audit_rows() if a.event == "preview"]
    assert audited.details["digest"] == "aa" and audited.details["exit_status"] == 0
    assert audited.details["why"] == "card" and audited.details["approvals_reset"] == []


async def test_a_changed_preview_resets_the_approvals_and_binds_the_next_ones(
    store: Store,
) -> None:
    _, rows = await paused_session(store)
    ledger_id = rows[0].id
    await store.set_preview(ledger_id, _preview("replicas: 3\n", "aa"), why="card")
    first = await store.decide(
        ledger_id,
        "approved",
        user_id="U1",
        ruling=Ruling(required_approvals=2),
        preview_digest="aa",
    )
    assert first.recorded and first.why == MoreApprovalsNeeded(1, 2)

    changed = await store.set_preview(
        ledger_id, _preview("replicas: 30\n", "bb", minutes=11), why="rerun", reset_approvals=True
    )
    assert changed is not None and changed.approvals == ()
    late = await store.decide(
        ledger_id,
        "approved",
        user_id="U2",
        ruling=Ruling(required_approvals=2),
        preview_digest="aa",
    )
    assert not late.recorded and late.why == PreviewChanged()
    assert late.row.approvals == ()

    for user in ("U1", "U2"):
        outcome = await store.decide(
            ledger_id,
            "approved",
            user_id=user,
            ruling=Ruling(required_approvals=2),
            preview_digest="bb",
        )
        assert outcome.recorded
    assert outcome.row.status == "approved"
    decisions = [a.details for a in await store.audit_rows() if a.event == "decision"]
    assert [d["preview_digest"] for d in decisions] == ["aa", "bb", "bb"]
    [refusal] = [a.details for a in await store.audit_rows() if a.event == "refusal"]
    assert refusal["why"] == "preview_changed" and refusal["preview_digest"] == "bb"
    # A decided call keeps its preview; a later run is not stored.
    assert await store.set_preview(ledger_id, _preview("x", "cc"), why="rerun") is None
