"""Tools the model may call: the `Tool` protocol, the `@tool` decorator, `ApprovalRequiredTool`.

A tool's arguments come from the model, so they are untrusted: `@tool` validates them with
pydantic against the function's type hints before the function ever sees them, and a validation
failure goes back to the model as the tool result instead of crashing the run.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Protocol, overload, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.fields import FieldInfo

from .exceptions import ToolError
from .messages import replace_lone_surrogates

__all__ = [
    "ApprovalRequiredTool",
    "FunctionTool",
    "Tool",
    "current_call_id",
    "tool",
]

current_call_id: ContextVar[str | None] = ContextVar("agent_core_current_call_id", default=None)
"""The id of the tool call being executed, while its `Tool.invoke` runs (None elsewhere): a
tool wrapper can log or measure the call without the `Tool` protocol carrying it."""


@runtime_checkable
class Tool(Protocol):
    """What the tool loop needs from a tool."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def parameters(self) -> dict[str, Any]:
        """JSON Schema of the arguments object, as sent to the model."""
        ...

    def requires_approval(self) -> bool: ...

    async def invoke(self, arguments: dict[str, Any]) -> str:
        """Run the tool. Raise `ToolError` (or anything) to report a failure to the model."""
        ...


def _to_text(value: Any) -> str:
    """What a tool's result (or error) becomes for the model, without lone surrogates."""
    if isinstance(value, BaseModel):
        value = value.model_dump_json()
    elif not isinstance(value, str):
        value = json.dumps(value, ensure_ascii=False, default=str)
    return replace_lone_surrogates(value)


class FunctionTool:
    """A Python function exposed as a tool; build it with `@tool`."""

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        requires_approval: bool = False,
    ) -> None:
        self.func = func
        self._name = name or func.__name__
        doc = inspect.getdoc(func) or ""
        self._description = description or doc.strip() or self._name
        self._requires_approval = requires_approval
        self._model, self._params = _arguments_model(func, self._name)
        schema = self._model.model_json_schema()
        schema.pop("title", None)
        self._parameters = schema

    @property
    def name(self) -> str:
        return self._name

    @property
    def description(self) -> str:
        return self._description

    @property
    def parameters(self) -> dict[str, Any]:
        return self._parameters

    def requires_approval(self) -> bool:
        return self._requires_approval

    async def invoke(self, arguments: dict[str, Any]) -> str:
        try:
            validated = self._model.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or '(arguments)'}: {err['msg']}"
                for err in exc.errors()
            )
            raise ToolError(f"invalid arguments for {self._name!r}: {problems}") from None
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for field, param in self._params:
            value = getattr(validated, field)
            if param.kind is param.POSITIONAL_ONLY:
                args.append(value)
            else:
                kwargs[param.name] = value
        if inspect.iscoroutinefunction(self.func):
            result = await self.func(*args, **kwargs)
        else:
            result = await asyncio.to_thread(self.func, *args, **kwargs)
        if inspect.isawaitable(result):  # an async callable that is not a coroutine function
            result = await result
        return _to_text(result)

    async def __call__(self, **kwargs: Any) -> str:
        return await self.invoke(kwargs)

    def __repr__(self) -> str:
        return f"FunctionTool({self._name!r})"


def _arguments_model(
    func: Callable[..., Any], name: str
) -> tuple[type[BaseModel], list[tuple[str, inspect.Parameter]]]:
    """A pydantic model of the function's parameters, and which model field feeds which one.

    Fields get neutral names (`p0`, `p1`, ...) and the parameter name as alias, so that any
    parameter name works: `json` or `schema` would shadow `BaseModel` attributes, and a leading
    underscore or `model_config` would be silently dropped from the schema.
    """
    fields: dict[str, Any] = {}
    params: list[tuple[str, inspect.Parameter]] = []
    for index, param in enumerate(inspect.signature(func).parameters.values()):
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {name!r}: *args/**kwargs cannot be described to a model")
        annotation = _resolve(func, name, param)
        if isinstance(param.default, FieldInfo):
            info = FieldInfo.merge_field_infos(param.default, Field(alias=param.name))
        elif param.default is inspect.Parameter.empty:
            info = Field(alias=param.name)
        else:
            info = Field(param.default, alias=param.name)
        field = f"p{index}"
        fields[field] = (annotation, info)
        params.append((field, param))
    config = ConfigDict(extra="forbid")
    model: type[BaseModel] = create_model(f"{name}_arguments", __config__=config, **fields)
    return model, params


def _resolve(func: Callable[..., Any], name: str, param: inspect.Parameter) -> Any:
    """The parameter's type hint, evaluated if it is a string (`from __future__ import
    annotations`). Only parameters are resolved: the return type is never needed."""
    annotation = param.annotation
    if annotation is inspect.Parameter.empty:
        return Any
    if not isinstance(annotation, str):
        return annotation
    target = inspect.unwrap(func)
    namespace = getattr(target, "__globals__", None)
    if namespace is None:  # a callable object: its __call__ knows the module
        namespace = getattr(type(target).__call__, "__globals__", {})
    try:
        return eval(annotation, namespace)
    except Exception as exc:
        raise TypeError(
            f"tool {name!r}: cannot resolve the type hint {annotation!r} of parameter "
            f"{param.name!r} ({exc}); define the type at module level"
        ) from None


@overload
def tool(func: Callable[..., Any], /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    requires_approval: bool = False,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Turn a function into a tool; its type hints become the JSON schema, its docstring the
    description. Works bare (`@tool`) or with options (`@tool(requires_approval=True)`)."""

    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(
            f, name=name, description=description, requires_approval=requires_approval
        )

    return wrap(func) if func is not None else wrap


class ApprovalRequiredTool:
    """Wraps any tool so that every call to it waits for a human decision."""

    def __init__(self, inner: Tool) -> None:
        self.inner = inner

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def description(self) -> str:
        return self.inner.description

    @property
    def parameters(self) -> dict[str, Any]:
        return self.inner.parameters

    def requires_approval(self) -> bool:
        return True

    async def invoke(self, arguments: dict[str, Any]) -> str:
        return await self.inner.invoke(arguments)

    def __repr__(self) -> str:
        return f"ApprovalRequiredTool({self.inner!r})"
