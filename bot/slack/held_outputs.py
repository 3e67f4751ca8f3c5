"""Command outputs held for the answer that follows them while the channel's posts are short.

An approved alert costs its card, the card's redraw and one answer. In a storm the command's
output (the `ToolRan` notice) is shown at the head of the run's next answer instead of as a
message of its own, whenever the channel's `chat.postMessage` budget (about one a second per
channel, bursts of 3) is being spent (it is not full: posts went out there in the last few
seconds, or messages put for its other threads wait to be sent); otherwise it is posted as
before, at once. Held in memory, per thread: anything else said in the thread, a card, or the
run's end or pause posts what is held first, so the thread's order is kept. A process killed in
between loses the held line from the thread (the call's output stays in the audit log, and the
run is reported cut short).
"""

from __future__ import annotations

from collections.abc import Callable

from ..runs.output import Thread

__all__ = ["HeldOutputs"]


class HeldOutputs:
    """Rendered outputs (mrkdwn) waiting for their thread's next answer."""

    def __init__(self, short: Callable[[Thread], bool] | None) -> None:
        self.short = short
        """`short(thread)`: the thread's channel's posts are being spent (a storm there)."""
        self._held: dict[tuple[str, str], list[str]] = {}

    def hold(self, thread: Thread, text: str) -> bool:
        """Keep `text` for the thread's next answer when its channel's posts are spent (or
        something is held already: the order holds); False when it is to be posted now."""
        key = (thread.channel_id, thread.thread_ts)
        if key not in self._held and (self.short is None or not self.short(thread)):
            return False
        self._held.setdefault(key, []).append(text)
        return True

    def take(self, thread: Thread) -> str:
        """What is held for the thread (and no longer), one output a line; "" when nothing."""
        return "\n".join(self._held.pop((thread.channel_id, thread.thread_ts), []))
