"""`opsgate chat` in a real terminal (a pty): Ctrl-C (SIGINT) at the prompt or at an approval
question ends the process at once, with status 130, instead of waiting for Enter."""

from __future__ import annotations

import asyncio
import os
import pty
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
                if not chunk:
                    raise AssertionError(
                        f"the chat closed its terminal before {text!r}: {self.seen}"
                    )
                self.seen += chunk

    def type(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")


def _read(fd: int) -> str:
    try:
        return os.read(fd, 4096).decode(errors="replace")
    except OSError:  # EIO: the other side is gone
        return ""


async def _chat(tmp_path: Path, llm: LLMStandIn) -> tuple[asyncio.subprocess.Process, _Terminal]:
    master, slave = pty.openpty()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "OPENAI_BASE_URL": llm.base_url,
        "OPSGATE_MODEL": "test-model",
        "OPSGATE_DB": str(tmp_path / "opsgate.db"),
    }
    proc = await asyncio.create_subprocess_exec(
        str(OPSGATE), "chat", cwd=tmp_path, env=env, stdin=slave, stdout=slave, stderr=slave
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
