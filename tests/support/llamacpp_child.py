"""Child process of `tests.support.llamacpp.LlamaCppServer`: start llama.cpp's server on
127.0.0.1 (a free port), print its address, serve until stdin closes.

Arguments: the GGUF path, n_ctx, and optionally a chat template file."""

from __future__ import annotations

import sys
from pathlib import Path

import xllamacpp


def main(argv: list[str]) -> None:
    params = xllamacpp.CommonParams()
    params.model.path = argv[0]
    params.n_ctx = int(argv[1])
    params.port = 0  # hostnames default to 127.0.0.1
    params.model_alias = {"smollm2-135m"}
    if len(argv) > 2:
        params.use_jinja = True
        params.chat_template = Path(argv[2]).read_text(encoding="utf-8")
    params.sampling.temp = 0.0
    params.sampling.seed = 42
    params.n_parallel = 1
    params.cpuparams.n_threads = 2
    params.cpuparams_batch.n_threads = 2
    server = xllamacpp.Server(params)
    print(server.listening_address, flush=True)
    sys.stdin.read()  # until the parent closes it (or dies)
    del server


if __name__ == "__main__":
    main(sys.argv[1:])
