"""A model turn with a deadline: a stream kept alive by SSE comments still ends.

A provider (or a proxy) may send keep-alive comments for ever; they reset every read timeout
and yield no update, so only a deadline on the whole turn bounds it. The stream runs in its
own task feeding a one-slot queue: the wait for the next update is bounded, never the
consumer's handling of an update, and the stream is opened and closed in one task.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TypeVar

from .exceptions import StreamError

__all__ = ["TurnDeadline", "closing", "within"]

_T = TypeVar("_T")


class TurnDeadline(StreamError):
    """The model did not finish its turn within the run's `turn_timeout`."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the model did not finish its turn within {seconds:g} s")
        self.seconds = seconds


class _End:
    """The stream ended normally."""


class _Raised:
    """The stream raised `exc`: the consumer raises it."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc


async def within(stream: AsyncIterator[_T], seconds: float | None) -> AsyncGenerator[_T, None]:
    """Yield `stream`'s items; raise `TurnDeadline` once `seconds` have passed since the first
    wait (None: no deadline, the stream as it is)."""
    if seconds is None:
        try:
            async for item in stream:
                yield item
        finally:
            await _aclose(stream)
        return
    queue: asyncio.Queue[tuple[_T] | _End | _Raised] = asyncio.Queue(maxsize=1)

    async def pump() -> None:
        try:
            async for item in stream:
                await queue.put((item,))
            await queue.put(_End())
        except Exception as exc:
            await queue.put(_Raised(exc))
        finally:
            await _aclose(stream)

    task = asyncio.create_task(pump(), name="model turn")
    deadline = asyncio.get_running_loop().time() + seconds
    try:
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    got = await queue.get()
            except TimeoutError:
                raise TurnDeadline(seconds) from None
            match got:
                case _End():
                    return
                case _Raised(exc=exc):
                    raise exc
                case (item,):
                    yield item
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _aclose(stream: AsyncIterator[object]) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        await aclose()


@contextlib.asynccontextmanager
async def closing(stream: AsyncIterator[_T]) -> AsyncGenerator[AsyncIterator[_T], None]:
    """Close a model stream however the loop leaves it, so its connection is released now."""
    try:
        yield stream
    finally:
        await _aclose(stream)
