"""`opsgate policy explain`: the verdict lines as pinned, through the real command line."""

from __future__ import annotations

import asyncio
import io
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.cli import main
from bot.cli.policy import explain as explain_call
from bot.policy import Policy
from bot.store import AllowanceRow, SQLiteStore

KUBECTL = Path(__file__).parents[1] / "fixtures" / "policies" / "kubectl.toml"


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # no stray .env
    monkeypatch.setenv("OPSGATE_POLICY", str(KUBECTL))
    monkeypatch.setenv("OPSGATE_DB", str(tmp_path / "opsgate.db"))
    return tmp_path


def explain(capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    assert main(["policy", "explain", *args]) == 0
    return capsys.readouterr().out.splitlines()


def verdicts(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("verdict: ")]


def previews(lines: list[str]) -> list[str]:
    """The preview lines (the policy's weekend freeze adds a line after them when the clock
    is inside it)."""
    return [line for line in lines if line.startswith("preview: ")]


@pytest.mark.parametrize(
    ("command", "verdict"),
    [
        ("kubectl get pods -n web", "verdict: runs without approval"),
        ("kubectl delete pod web-1", "verdict: needs 2 approvals from U0SRE1, U0SRE2, U0SRE3"),
        (
            "kubectl delete namespace web",
            "verdict: forbidden by tools.run_command.rules[2]: Namespaces are deleted through "
            "Terraform, never from chat.",
        ),
        ("echo ok; kubectl delete ns web", "verdict: forbidden by tools.run_command.rules[2]"),
        ('bash -c "kubectl get pods"', "verdict: needs 1 approval from U0BOB, U0CAROL"),
        ("kubectl rollout restart deploy/web", "verdict: needs 1 approval from U0BOB, U0CAROL"),
    ],
)
def test_six_commands(
    env: Path, capsys: pytest.CaptureFixture[str], command: str, verdict: str
) -> None:
    lines = explain(capsys, "--channel", "C0OPS", "run_command", command)
    [line] = verdicts(lines)
    assert line.startswith(verdict), lines
    assert not (env / "opsgate.db").exists()  # nothing created, nothing run


def test_parts_rules_terms_and_the_shape_an_allow_would_create(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = explain(capsys, "run_command", "echo ok; kubectl delete pod web-1")
    assert "part 1: echo ok" in lines and "part 2: kubectl delete pod web-1" in lines
    assert "  tools.run_command.rules[5]: echo … -> runs without approval" in lines
    unknown = explain(capsys, "run_command", "ls -la; kubectl -n web delete pod web-1")
    assert (
        "  no rule: no rule names the program 'ls': the tool's default = \"always\" "
        "-> needs approval"
    ) in unknown
    assert (
        "  tools.run_command.rules[1]: kubectl delete … (its verb after -n web) -> needs approval"
    ) in unknown
    assert "  tools.run_command.rules[1]: kubectl delete … -> needs approval" in lines
    assert "approvers: U0SRE1, U0SRE2, U0SRE3 (tools.run_command.rules[1].approvers)" in lines
    assert "quorum: 2" in lines and "ttl: 15m" in lines
    assert 'allow: the card offers no "Allow for" for this call' in lines
    restart = explain(capsys, "run_command", "kubectl rollout restart deploy/web")
    assert any(
        line.startswith('allow: "Allow for 1h" creates: kubectl rollout restart …')
        for line in restart
    )
    assert any(
        line.startswith("  does not cover: kubectl rollout restart; rm -rf x") for line in restart
    )


def test_anyone_in_the_channel_and_json_arguments(
    env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPSGATE_POLICY")
    assert verdicts(explain(capsys, "run_command", "ls")) == [
        "verdict: needs 1 approval from anyone in the channel but the requester"
    ]
    assert verdicts(explain(capsys, "http_request", '{"url": "http://x", "method": "GET"}')) == [
        "verdict: runs without approval"
    ]
    assert main(["policy", "explain", "http_request", "not json"]) == 2


async def _allowance(db: Path) -> AllowanceRow:
    async with SQLiteStore(db) as store:
        return await store.create_allowance(
            channel_id="C0OPS",
            tool="run_command",
            shape='{"kind": "argv", "argv": ["kubectl", "rollout", "restart"], "prefix": true, '
            '"rule": "tools.run_command.rules[3]"}',
            label="kubectl rollout restart …",
            granted_by="U0BOB",
            ledger_id="L1",
            expires_at=datetime.now(UTC) + timedelta(hours=1),
        )


def test_an_active_allowance_that_would_cover_the_call_is_named(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    row = asyncio.run(_allowance(env / "opsgate.db"))
    [line] = verdicts(
        explain(capsys, "--channel", "C0OPS", "run_command", "kubectl rollout restart deploy/api")
    )
    assert line.startswith(f"verdict: covered by allowance {row.id} (granted by U0BOB")
    # Not in another channel, and never for a compound command.
    [other] = verdicts(
        explain(capsys, "--channel", "C0ELSE", "run_command", "kubectl rollout restart deploy/api")
    )
    assert other.startswith("verdict: needs 1 approval")
    [compound] = verdicts(
        explain(
            capsys, "--channel", "C0OPS", "run_command", "kubectl rollout restart deploy/api; rm x"
        )
    )
    assert compound.startswith("verdict: needs 1 approval")


def test_the_preview_that_would_run_is_named_not_run(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = explain(capsys, "--channel", "C0OPS", "run_command", "kubectl apply -f web.yaml")
    assert verdicts(lines) == ["verdict: needs 1 approval from U0BOB, U0CAROL"]
    assert previews(lines) == [
        "preview: kubectl diff -f {arg:-f|--filename} -> would run: kubectl diff -f web.yaml "
        "(preview_ttl 5m)"
    ]
    lines = explain(capsys, "run_command", "kubectl apply -k overlays/prod")
    assert previews(lines) == [
        "preview: kubectl diff -f {arg:-f|--filename} -> would fail: no value for "
        "{arg:-f|--filename} in this command (preview_ttl 5m)"
    ]
    assert not (env / "opsgate.db").exists()


def test_a_freeze_in_force_now_is_named_with_its_break_glass() -> None:
    policy = Policy.load(KUBECTL)
    saturday = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)  # inside Friday 17:00 + 63h

    def lines(command: str, now: datetime) -> list[str]:
        out = io.StringIO()
        assert explain_call(policy, "run_command", command, channel="C0OPS", out=out, now=now) == 0
        return out.getvalue().splitlines()

    restart = lines("kubectl rollout restart deploy/web", saturday)
    assert restart[-1] == (
        "freeze: freezes[0] in force until 2026-12-07 08:00 UTC (Weekend change freeze: only "
        "emergencies, by breaking glass.): no Approve until then; Break glass offered to "
        "U0SRE1, U0SRE2"
    )
    assert verdicts(restart) == ["verdict: needs 1 approval from U0BOB, U0CAROL"]  # unchanged
    delete = lines("kubectl delete pod web-1", saturday)
    assert delete[-1].endswith("no Approve until then; no Break glass")
    assert not any(line.startswith("freeze: ") for line in lines("kubectl get pods", saturday))
    tuesday = datetime(2026, 12, 8, 12, 0, tzinfo=UTC)
    assert not any(line.startswith("freeze: ") for line in lines("kubectl delete pod x", tuesday))


def test_each_part_says_which_rule_and_why_in_words(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = explain(
        capsys, "run_command", "kubectl --bogus x delete ns web; kubectl --bogus get pods"
    )
    assert (
        "  tools.run_command.rules[2]: kubectl delete namespace (could match: the verb's place "
        "is unknown) -> forbidden"
    ) in lines
    assert (
        "  no rule: the option '--bogus' is not one the policy knows 'kubectl' to take before "
        "its verb, so its verb's place is unknown: approval required -> needs approval"
    ) in lines
    risky = explain(capsys, "run_command", "kubectl --kubeconfig /tmp/k get pods")
    assert (
        "  no rule: the option --kubeconfig reads another kubeconfig, whose exec credentials run "
        "a program: approval required (tools.run_command.rules[0] alone would not ask) "
        "-> needs approval"
    ) in risky


def test_an_unknown_tool_is_said_to_be_unknown(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["policy", "explain", "run_comand", "ls"]) == 1
    out = capsys.readouterr().out
    assert "unknown tool 'run_comand': the bot has no such tool, so there is no verdict" in out
    assert "verdict:" not in out
    assert "known tools: http_request, run_command" in out
