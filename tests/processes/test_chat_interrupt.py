"""`opsgate chat` in a real terminal (a pty): Ctrl-C (SIGINT) at the prompt or at an approval
question ends the process at once, with status 130, instead of waiting for Enter; a run cut by
Ctrl-C is stopped and the next chat on the database works; a call left waiting is offered
again; and long output reaches the terminal whole (stdout stays blocking)."""

from __future__ import annotations

import asyncio
import os
import pty
import select
import signal
import sys
from pathlib import Path

from tests.support.llm_server import LLMStandIn

OPSGATE = Path(sys.executable).with_name("opsgate")


class _Terminal:
    """The chat's pty: what it printed so far, and a way to type a line."""

    def __init__(self, master: int) -> None:
        self.master = master
        self.seen = ""

    async def wait_for(self, text: str, timeout: float = 30) -> None:
        async with asyncio.timeout(timeout):
            while text not in self.seen:
                chunk = await asyncio.to_thread(_read, self.master)
                if chunk is None:
                    continue
                if not chunk:
                    raise AssertionError(
                        f"the chat closed its terminal before {text!r}: {self.seen}"
                    )
                self.seen += chunk

    def type(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")


def _read(fd: int) -> str | None:
    """What the chat printed next; None when nothing came within half a second, so that no
    reading thread outlives a failed test (the event loop's shutdown would wait on it)."""
    try:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if not ready:
            return None
        return os.read(fd, 4096).decode(errors="replace")
    except OSError:  # EIO or a closed descriptor: the other side is gone
        return ""


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def _chat(tmp_path: Path, llm: LLMStandIn) -> tuple[asyncio.subprocess.Process, _Terminal]:
    """A chat on `tmp_path`'s database (the same one every time) in a fresh pty."""
    master, slave = pty.openpty()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "OPENAI_BASE_URL": llm.base_url,
        "OPSGATE_MODEL": "test-model",
        "OPSGATE_DB": str(tmp_path / "opsgate.db"),
    }
    proc = await asyncio.create_subprocess_exec(
        str(OPSGATE),
        "chat",
        cwd=tmp_path,
        env=env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        # As from a terminal: a runner started in the background without job control (CI
        # under `&`) ignores SIGINT, and its children would inherit that.
        preexec_fn=_default_sigint,
    )
    os.close(slave)
    return proc, _Terminal(master)


async def _interrupted(proc: asyncio.subprocess.Process, term: _Terminal) -> int:
    proc.send_signal(signal.SIGINT)
    try:
        return await asyncio.wait_for(proc.wait(), 20)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        os.close(term.master)


async def test_ctrl_c_at_the_prompt_ends_the_chat(tmp_path: Path) -> None:
    async with LLMStandIn() as llm:
        proc, term = await _chat(tmp_path, llm)
        await term.wait_for("you> ")
        assert await _interrupted(proc, term) == 130


async def test_ctrl_c_at_an_approval_question_ends_the_chat(tmp_path: Path) -> None:
    async with LLMStandIn() as llm:
        llm.reply_tool_calls([("call_1", "run_command", {"command": "touch never"})])
        proc, term = await _chat(tmp_path, llm)
        await term.wait_for("you> ")
        term.type("touch a file")
        await term.wait_for("approve? ")
        # Nothing but the card and the question since the prompt: no log lines in between.
        assert " INFO " not in term.seen and "HTTP Request" not in term.seen
        assert await _interrupted(proc, term) == 130
    assert not (tmp_path / "never").exists()


async def _ended(proc: asyncio.subprocess.Process, term: _Terminal) -> int:
    """Close the chat's input (Ctrl-D) and wait for it to end."""
    os.write(term.master, b"\x04")
    try:
        return await asyncio.wait_for(proc.wait(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        os.close(term.master)


async def test_ctrl_c_mid_answer_stops_the_run_and_the_next_chat_works(tmp_path: Path) -> None:
    async with LLMStandIn() as llm:
        release = asyncio.Event()
        first = llm.reply_text_gated("This answer is cut short by Ctrl-C.", release)
        proc, term = await _chat(tmp_path, llm)
        await term.wait_for("you> ")
        term.type("tell me a long story")
        await asyncio.wait_for(first.wait(), 30)
        await term.wait_for("opsgate> This ans")  # the answer has started, set apart
        assert "(thinking…)" in term.seen
        assert await _interrupted(proc, term) == 130
        # Two Ctrl-C mid-answer used to leave runs going for ever: every later chat was queued.
        llm.reply_text("A fresh answer.")
        proc, term = await _chat(tmp_path, llm)
        await term.wait_for("you> ")
        term.type("hello again")
        await term.wait_for("A fresh answer.")
        assert "Queued" not in term.seen
        assert await _ended(proc, term) == 0


async def test_a_call_left_waiting_by_ctrl_c_is_offered_again(tmp_path: Path) -> None:
    marker = tmp_path / "approved-later"
    async with LLMStandIn() as llm:
        llm.reply_tool_calls([("call_1", "run_command", {"command": f"touch {marker}"})])
        proc, term = await _chat(tmp_path, llm)
        await term.wait_for("you> ")
        term.type("touch a file")
        await term.wait_for("approve? ")
        assert await _interrupted(proc, term) == 130
        assert not marker.exists()

        llm.reply_text("Touched it.")
        proc, term = await _chat(tmp_path, llm)
        await term.wait_for("approve? ")  # before any new question: the waiting call, again
        assert "run_command wants to run" in term.seen and str(marker) in term.seen
        term.type("y")
        await term.wait_for("Touched it.")
        await term.wait_for("you> ")
        assert await _ended(proc, term) == 0
    assert marker.exists()


async def test_1500_lines_reach_a_real_terminal_whole(tmp_path: Path) -> None:
    """Far more than a pty buffers (about 150 KB), read only once the model has answered: a
    stdout turned non-blocking loses lines here (273 of 1,500 reached a terminal once)."""
    lines = [
        f"line {n:04d}: " + "the web tier is healthy and the queue drains " * 2 for n in range(1500)
    ]
    async with LLMStandIn() as llm:
        llm.reply_text("\n".join(lines) + "\nTHE END", chunk_size=400)
        proc, term = await _chat(tmp_path, llm)
        await term.wait_for("you> ")
        term.type("print the whole log")
        await llm.wait_for_requests(1, timeout=30)
        await term.wait_for("THE END\r\n", timeout=60)
        await term.wait_for("you> ", timeout=30)
        shown = [line for line in term.seen.split("\r\n") if "line " in line]
        assert len(shown) == 1500
        assert shown[0].endswith(lines[0]) and shown[1:] == lines[1:]
        assert await _ended(proc, term) == 0
