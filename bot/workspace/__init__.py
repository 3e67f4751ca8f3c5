"""The local workspace: `opsgate run` without Slack tokens serves a page that stands in for
Slack, with the same bot, store, policy and tools behind it (`startup.serve_workspace`)."""

from .startup import LOOPBACK, local_settings, serve_workspace

__all__ = ["LOOPBACK", "local_settings", "serve_workspace"]
