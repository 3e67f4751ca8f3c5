"""The policy reference's worked example is real: its kubectl policy is read as
written and every `opsgate policy explain` transcript shown under it is what the command prints,
line for line, through the real command line."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from bot.cli import main
from bot.policy import Policy

POLICY_DOC = Path(__file__).parents[2] / "docs" / "policy.md"
_SECTION = "**Worked example: a kubectl policy.**"


def _example() -> tuple[str, list[tuple[str, list[str]]]]:
    """The example's TOML and each transcript: (the command line, the lines it prints)."""
    text = POLICY_DOC.read_text(encoding="utf-8")
    start = text.index(_SECTION)
    end = text.index("### Change freezes and break-glass", start)
    blocks = re.findall(r"```(\w*)\n(.*?)```", text[start:end], flags=re.S)
    [toml] = [body for lang, body in blocks if lang == "toml"]
    transcripts: list[tuple[str, list[str]]] = []
    for lang, body in blocks:
        if lang:
            continue
        for chunk in body.strip().split("\n\n"):
            first, *printed = chunk.splitlines()
            assert first.startswith("$ opsgate policy explain "), first
            transcripts.append((first.removeprefix("$ "), printed))
    return toml, transcripts


TOML, TRANSCRIPTS = _example()


def test_the_fixture_the_other_explain_tests_use_is_the_readmes_policy() -> None:
    fixture = Path(__file__).parents[1] / "fixtures" / "policies" / "kubectl.toml"
    assert TOML in fixture.read_text(encoding="utf-8")


def test_the_example_policy_is_read_as_written() -> None:
    policy = Policy.from_toml(TOML, source="opsgate.toml")
    assert [len(t.rules) for t in policy.tools.values()] == [6]
    assert len(policy.freezes) == 1
    assert len(TRANSCRIPTS) == 9  # the eight commands and the apply


@pytest.mark.parametrize(("command", "printed"), TRANSCRIPTS, ids=[c for c, _ in TRANSCRIPTS])
def test_each_transcript_is_what_the_command_prints(
    command: str,
    printed: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "opsgate.toml").write_text(TOML, encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # `policy: opsgate.toml`, and no stray .env
    monkeypatch.setenv("OPSGATE_POLICY", "opsgate.toml")
    monkeypatch.setenv("OPSGATE_DB", str(tmp_path / "opsgate.db"))
    argv = shlex.split(command)
    assert argv[:3] == ["opsgate", "policy", "explain"]
    assert main(argv[1:]) == 0
    # The example's freeze is weekly (Friday 17:00 to Monday 08:00 UTC); the transcripts are
    # of a weekday, so the `freeze: ` line a weekend run adds is left out here (its own test
    # is in test_explain.py, on an injected time).
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if not line.startswith("freeze: ")] == printed
