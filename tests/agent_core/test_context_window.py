"""The context window: which source wins, what servers say about it, and what the loop does
when a request is refused as too long without saying the window (halve, at most 3 times)."""

from __future__ import annotations

from typing import Any

import httpx
from aiohttp import web

from agent_core import (
    AgentSession,
    ChatClientAgent,
    ContextBudget,
    Finish,
    FinishReason,
    InMemoryContextWindows,
    resolve_context_window,
)
from agent_core.openai import OpenAIChatClient
from tests.support.llm_server import LLMStandIn
from tests.support.loopback import serve_on_loopback


class ModelServer:
    """`GET /v1/models` and `GET /props` on 127.0.0.1, answering the given JSON (or 404)."""

    def __init__(self, models: Any = None, props: Any = None) -> None:
        self.models, self.props = models, props
        self.base_url = ""
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> ModelServer:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/props", self._props)
        self._runner, base = await serve_on_loopback(app, shutdown_timeout=1.0)
        self.base_url = f"{base}/v1"
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _models(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(self.models)

    async def _props(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(self.props)

    async def _answer(self, body: Any) -> web.StreamResponse:
        if body is None:
            return web.json_response({"error": "not found"}, status=404)
        return web.json_response(body)


async def window_of(http: httpx.AsyncClient, server: ModelServer, model: str) -> tuple[int, str]:
    client = OpenAIChatClient(http, model=model, base_url=server.base_url)
    return await resolve_context_window(model, probe=client)


async def test_vllm_and_openrouter_say_it_in_the_model_list(http: httpx.AsyncClient) -> None:
    vllm = {"data": [{"id": "qwen", "max_model_len": 32768}, {"id": "other"}]}
    async with ModelServer(models=vllm) as server:
        assert await window_of(http, server, "qwen") == (
            32768,
            f"GET {server.base_url}/models (max_model_len)",
        )
    openrouter = {"data": [{"id": "meta/llama", "context_length": 131072}]}
    async with ModelServer(models=openrouter) as server:
        assert (await window_of(http, server, "meta/llama"))[0] == 131072


async def test_llamacpp_running_window_comes_from_props_not_the_training_window(
    http: httpx.AsyncClient,
) -> None:
    models = {"data": [{"id": "smollm2", "meta": {"n_ctx_train": 8192}}]}
    props = {"default_generation_settings": {"n_ctx": 4096}}
    async with ModelServer(models=models, props=props) as server:
        tokens, source = await window_of(http, server, "smollm2")
    assert tokens == 4096 and source.endswith("/props (n_ctx)")


async def test_the_order_setting_memory_server_name_default(http: httpx.AsyncClient) -> None:
    memory = InMemoryContextWindows()
    async with ModelServer(models={"data": [{"id": "gpt-4o", "max_model_len": 9000}]}) as server:
        probe = OpenAIChatClient(http, model="gpt-4o", base_url=server.base_url)
        assert await resolve_context_window("gpt-4o", configured=5000, probe=probe) == (
            5000,
            "the setting",
        )
        await memory.remember_context_window("gpt-4o", 7000)
        assert (await resolve_context_window("gpt-4o", memory=memory, probe=probe))[0] == 7000
        assert (await resolve_context_window("gpt-4o", probe=probe))[0] == 9000
    async with ModelServer() as silent:  # neither list nor props says anything
        probe = OpenAIChatClient(http, model="gpt-4o", base_url=silent.base_url)
        assert await resolve_context_window("gpt-4o", probe=probe) == (128_000, "the model's name")
        unknown = OpenAIChatClient(http, model="my-model", base_url=silent.base_url)
        assert (await resolve_context_window("my-model", probe=unknown))[1].startswith(
            "the default"
        )
    down = OpenAIChatClient(http, model="my-model", base_url="http://127.0.0.1:9/v1")
    assert (await resolve_context_window("my-model", probe=down))[0] == 128_000


async def test_a_refusal_without_a_window_halves_the_budget_three_times_then_says_what_to_do(
    http: httpx.AsyncClient,
) -> None:
    async def refuse(body: dict[str, Any]) -> web.StreamResponse:
        error = {"error": {"message": "prompt is too long for the context window"}}
        return web.json_response(error, status=400)

    async with LLMStandIn() as llm:
        for _ in range(4):
            llm.reply_with(refuse)
        client = OpenAIChatClient(http, model="m", base_url=llm.base_url, max_retries=0)
        budget = ContextBudget(context_tokens=64_000, advice="set OPSGATE_CONTEXT_TOKENS")
        agent = ChatClientAgent(client, context=budget)
        updates = [u async for u in agent.run("hello " * 200, AgentSession("s1"))]
    [finish] = [u for u in updates if isinstance(u, Finish)]
    assert finish.finish_reason is FinishReason.ERROR
    assert finish.error is not None and "OPSGATE_CONTEXT_TOKENS" in finish.error
    assert "3 times" in finish.error
    bounds = [body["max_tokens"] for body in llm.requests]
    assert len(bounds) == 4 and bounds == sorted(bounds, reverse=True)  # the budget shrank
    assert llm.queued == 0 and llm.unexpected == []
