"""`opsgate ask`, `opsgate receipt verify` and `opsgate exec-approved` as child processes
against a real `opsgate run --http`, decided by signed clicks."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from bot.plane.receipts import Claims, SigningKey, new_key_pem, sign
from tests.plane.support import opsgate, plane_bot

pytestmark = pytest.mark.processes


async def _verify(url: str, receipt: str, *extra: str, cwd: Path) -> tuple[int, str]:
    cli = await opsgate("receipt", "verify", receipt, "--keys", url, *extra, cwd=cwd)
    code, out, err = await cli.result()
    return code, out + err


async def test_ask_approved_prints_a_receipt_and_exec_runs_the_argv_once(tmp_path: Path) -> None:
    marker = tmp_path / "ran.txt"
    argv = [sys.executable, "-c", f"open({str(marker)!r}, 'a').write('ran\\n')"]
    async with plane_bot(tmp_path) as plane:
        asking = await opsgate(
            "ask", "--reason", "release 7", "--exec", "--", *argv, url=plane.bot.url, cwd=tmp_path
        )
        ledger_id, card_ts = await plane.card()
        assert not marker.exists()
        assert await plane.click("opsgate_approve", ledger_id, card_ts, "U0BOB") == 200
        code, out, err = await asking.result()
        assert code == 0, err
        assert marker.read_text() == "ran\n"
        assert "card: " in err
        receipt = out.strip()

        code, said = await _verify(plane.bot.url, receipt, cwd=tmp_path)
        assert code == 0 and said.startswith("receipt valid: run_command")
        code, said = await _verify(plane.bot.url, receipt, "--argv", *argv, cwd=tmp_path)
        assert code == 0 and "approved by U0BOB" in said
        code, said = await _verify(plane.bot.url, receipt, "--argv", "rm", "-rf", "/", cwd=tmp_path)
        assert code == 1 and said.startswith("receipt invalid: argv")
        head, body, sig = receipt.split(".")
        forged = f"{head}.{body[:-2]}AA.{sig}"
        code, said = await _verify(plane.bot.url, forged, cwd=tmp_path)
        assert code == 1 and "receipt invalid" in said
        once = str(tmp_path / "used.db")
        assert (await _verify(plane.bot.url, receipt, "--once", once, cwd=tmp_path))[0] == 0
        code, said = await _verify(plane.bot.url, receipt, "--once", once, cwd=tmp_path)
        assert code == 1 and "replayed" in said

        ran = await opsgate(
            "exec-approved", receipt, "--keys", plane.bot.url, "--", *argv, cwd=tmp_path
        )
        assert (await ran.result())[0] == 0
        assert marker.read_text() == "ran\nran\n"
        other = await opsgate(
            "exec-approved", receipt, "--keys", plane.bot.url, "--", "true", cwd=tmp_path
        )
        code, _, err = await other.result()
        assert code == 1 and "argv" in err
        assert marker.read_text() == "ran\nran\n"


async def test_ask_rejected_exits_1_with_the_reason(tmp_path: Path) -> None:
    async with plane_bot(tmp_path) as plane:
        asking = await opsgate("ask", "--", "echo", "hi", url=plane.bot.url, cwd=tmp_path)
        ledger_id, card_ts = await plane.card()
        await plane.reject(ledger_id, card_ts, "U0BOB", "not today")
        code, out, err = await asking.result()
        assert (code, out) == (1, "")
        assert "rejected" in err and "not today" in err


async def test_ask_forbidden_exits_1_at_once_without_a_card(tmp_path: Path) -> None:
    async with plane_bot(tmp_path) as plane:
        asking = await opsgate("ask", "--", "rm", "-rf", "/", url=plane.bot.url, cwd=tmp_path)
        code, out, err = await asking.result(timeout=30)
        assert (code, out) == (1, "")
        assert "forbidden" in err and "never" in err
        assert plane.cards() == []


async def test_the_requester_cannot_approve_their_own_request(tmp_path: Path) -> None:
    async with plane_bot(tmp_path) as plane:
        asking = await opsgate(
            "ask",
            "--requester",
            "U0ALICE",
            "--json",
            "--",
            "echo",
            "mine",
            url=plane.bot.url,
            cwd=tmp_path,
        )
        ledger_id, card_ts = await plane.card()
        assert await plane.click("opsgate_approve", ledger_id, card_ts, "U0ALICE") == 200
        await plane.slack.wait_for("chat.postEphemeral", timeout=30)
        assert asking.process.returncode is None
        assert await plane.click("opsgate_approve", ledger_id, card_ts, "U0BOB") == 200
        code, out, err = await asking.result()
        assert code == 0, err
        assert '"decided_by": ["U0BOB"]' in out


async def test_two_people_must_approve_a_two_person_rule(tmp_path: Path) -> None:
    async with plane_bot(tmp_path) as plane:
        asking = await opsgate("ask", "--", "deploy", "prod", url=plane.bot.url, cwd=tmp_path)
        ledger_id, card_ts = await plane.card()
        assert await plane.click("opsgate_approve", ledger_id, card_ts, "U0BOB") == 200
        await plane.slack.wait_for("chat.update", timeout=30)
        assert asking.process.returncode is None
        assert await plane.click("opsgate_approve", ledger_id, card_ts, "U0CAROL") == 200
        code, out, err = await asking.result()
        assert code == 0, err
        code, said = await _verify(plane.bot.url, out.strip(), cwd=tmp_path)
        assert code == 0 and "U0BOB, U0CAROL" in said


async def test_ask_exits_3_when_its_wait_ends_undecided(tmp_path: Path) -> None:
    async with plane_bot(tmp_path) as plane:
        asking = await opsgate(
            "ask", "--wait", "2s", "--", "echo", "slow", url=plane.bot.url, cwd=tmp_path
        )
        code, out, err = await asking.result()
        assert (code, out) == (3, "")
        assert "still pending" in err


async def test_ask_without_a_reachable_opsgate_exits_2(tmp_path: Path) -> None:
    asking = await opsgate("ask", "--", "true", url="http://127.0.0.1:9", cwd=tmp_path)
    code, _, err = await asking.result()
    assert code == 2 and "cannot reach" in err


async def test_ask_exits_3_when_the_request_expires(tmp_path: Path) -> None:
    rule = '\n[[tools.run_command.rules]]\nprefix = ["slow"]\napproval = "always"\nttl = "2s"\n'
    async with plane_bot(tmp_path, extra=rule) as plane:
        asking = await opsgate("ask", "--", "slow", "job", url=plane.bot.url, cwd=tmp_path)
        await plane.card()
        code, out, err = await asking.result()
        assert (code, out) == (3, "")
        assert "expired" in err


async def test_the_bot_signs_with_opsgate_receipt_key_and_an_expired_receipt_is_refused(
    tmp_path: Path,
) -> None:
    key_file = tmp_path / "receipts.pem"
    key_file.write_text(new_key_pem())
    key = SigningKey(key_file.read_text())
    async with plane_bot(tmp_path, OPSGATE_RECEIPT_KEY=str(key_file)) as plane:
        served = (await plane.http.get(f"{plane.bot.url}/v1/keys")).json()
        assert [k["kid"] for k in served["keys"]] == [key.kid]
        asking = await opsgate("ask", "--", "uptime", url=plane.bot.url, cwd=tmp_path)
        code, out, err = await asking.result()
        assert code == 0, err
        assert (await _verify(str(key_file), out.strip(), "--argv", "uptime", cwd=tmp_path))[0] == 0
    now = int(time.time())
    stale = sign(key, Claims("r9", now - 120, now - 60, "run_command", "d", (), None, "C0OPS"))
    code, said = await _verify(str(key_file), stale, cwd=tmp_path)
    assert code == 1 and said.startswith("receipt invalid: expired")
