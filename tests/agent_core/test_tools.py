"""`@tool`, `FunctionTool` and `ApprovalRequiredTool`: schemas from type hints, validation of the
model's (untrusted) arguments, sync and async functions."""

from __future__ import annotations

import asyncio
import threading
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from agent_core import ApprovalRequiredTool, FunctionTool, Tool, ToolError, tool


@tool
def restart(service: str, force: bool = False, wait_seconds: int | None = None) -> str:
    """Restart a service.

    Use only when the service is unhealthy.
    """
    return f"restarted {service} force={force} wait={wait_seconds}"


def test_schema_comes_from_type_hints() -> None:
    assert restart.name == "restart"
    assert restart.parameters["type"] == "object"
    assert restart.parameters["required"] == ["service"]
    assert restart.parameters["additionalProperties"] is False
    properties = restart.parameters["properties"]
    assert set(properties) == {"service", "force", "wait_seconds"}
    assert properties["service"]["type"] == "string"
    assert properties["force"]["type"] == "boolean"
    assert properties["force"]["default"] is False
    assert {"type": "integer"} in properties["wait_seconds"]["anyOf"]
    assert {"type": "null"} in properties["wait_seconds"]["anyOf"]
    assert properties["wait_seconds"]["default"] is None
    assert "title" not in restart.parameters


def test_the_docstring_is_the_description() -> None:
    assert restart.description == ("Restart a service.\n\nUse only when the service is unhealthy.")


def test_richer_hints_reach_the_schema() -> None:
    @tool
    def tail_logs(
        service: Annotated[str, Field(description="the unit name")],
        lines: Annotated[int, Field(ge=1, le=500)] = 50,
        level: Literal["info", "warn", "error"] = "info",
        hosts: list[str] | None = None,
    ) -> str:
        return ""

    properties = tail_logs.parameters["properties"]
    assert properties["service"]["description"] == "the unit name"
    assert properties["lines"]["minimum"] == 1 and properties["lines"]["maximum"] == 500
    assert properties["level"]["enum"] == ["info", "warn", "error"]
    assert tail_logs.parameters["required"] == ["service"]
    assert tail_logs.description == "tail_logs"  # no docstring: the name


def test_name_description_and_approval_can_be_given() -> None:
    @tool(name="kubectl_apply", description="Apply a manifest.", requires_approval=True)
    async def apply(manifest: str) -> str:
        """Not this."""
        return manifest

    assert apply.name == "kubectl_apply"
    assert apply.description == "Apply a manifest."
    assert apply.requires_approval() is True
    assert restart.requires_approval() is False


async def test_parameter_names_that_clash_with_pydantic_are_kept() -> None:
    @tool
    def fetch(json: bool, schema: str = "v1", _trace: bool = False, model_config: str = "") -> str:
        return f"{json} {schema} {_trace} {model_config!r}"

    assert set(fetch.parameters["properties"]) == {"json", "schema", "_trace", "model_config"}
    assert fetch.parameters["required"] == ["json"]
    result = await fetch.invoke({"json": True, "_trace": True, "model_config": "x"})
    assert result == "True v1 True 'x'"


def test_an_unresolvable_parameter_type_is_reported_at_definition() -> None:
    class Local(BaseModel):
        x: int

    def uses_local(item: Local) -> str:
        return ""

    with pytest.raises(TypeError, match=r"uses_local.*'item'"):
        tool(uses_local)


def test_var_args_cannot_be_described() -> None:
    def anything(*args: str, **kwargs: str) -> str:
        return ""

    with pytest.raises(TypeError, match="anything"):
        tool(anything)


async def test_an_async_function_is_awaited_with_validated_arguments() -> None:
    @tool
    async def add(a: int, b: int = 2) -> int:
        await asyncio.sleep(0)
        return a + b

    assert await add.invoke({"a": 1}) == "3"
    assert await add.invoke({"a": "40", "b": 2}) == "42"  # lax coercion of numeric strings


async def test_a_sync_function_runs_off_the_event_loop_thread() -> None:
    loop_thread = threading.get_ident()

    @tool
    def where() -> str:
        return "loop" if threading.get_ident() == loop_thread else "worker"

    assert await where.invoke({}) == "worker"


async def test_an_async_callable_object_is_awaited() -> None:
    class Probe:
        __name__ = "probe"

        async def __call__(self, target: str) -> str:
            return f"probed {target}"

    probe = FunctionTool(Probe())
    assert await probe.invoke({"target": "db"}) == "probed db"


async def test_positional_only_parameters_are_passed_positionally() -> None:
    @tool
    def pair(a: str, /, b: str) -> str:
        return a + b

    assert await pair.invoke({"a": "x", "b": "y"}) == "xy"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"service": 5}, "service: Input should be a valid string"),
        ({}, "service: Field required"),
        ({"service": "api", "force": "maybe"}, "force: Input should be a valid boolean"),
        ({"service": "api", "sudo": True}, "sudo: Extra inputs are not permitted"),
    ],
    ids=["wrong-type", "missing", "bad-bool", "extra"],
)
async def test_invalid_arguments_raise_a_tool_error_naming_the_problem(
    arguments: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ToolError) as raised:
        await restart.invoke(arguments)
    assert "invalid arguments for 'restart'" in str(raised.value)
    assert expected in str(raised.value)


async def test_validation_happens_before_the_function_runs() -> None:
    calls: list[int] = []

    @tool
    def record(count: int) -> str:
        calls.append(count)
        return "ok"

    with pytest.raises(ToolError):
        await record.invoke({"count": "not a number"})
    assert calls == []


async def test_results_become_text() -> None:
    class Status(BaseModel):
        service: str
        healthy: bool

    @tool
    def as_model() -> Status:
        return Status(service="api", healthy=True)

    @tool
    def as_dict() -> dict[str, Any]:
        return {"größe": 3, "ok": True}

    @tool
    def as_text() -> str:
        return "plain"

    assert await as_model.invoke({}) == '{"service":"api","healthy":true}'
    assert await as_dict.invoke({}) == '{"größe": 3, "ok": true}'
    assert await as_text.invoke({}) == "plain"


async def test_approval_required_tool_wraps_any_tool() -> None:
    gated = ApprovalRequiredTool(restart)

    assert isinstance(gated, Tool)
    assert gated.requires_approval() is True
    assert (gated.name, gated.description, gated.parameters) == (
        restart.name,
        restart.description,
        restart.parameters,
    )
    assert await gated.invoke({"service": "api"}) == "restarted api force=False wait=None"
    with pytest.raises(ToolError):
        await gated.invoke({"service": 1})


def test_function_tools_satisfy_the_tool_protocol() -> None:
    assert isinstance(restart, Tool)
    assert isinstance(restart, FunctionTool)
