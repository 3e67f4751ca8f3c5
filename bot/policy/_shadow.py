"""`[shadow]`: a second policy judged beside the live one, its verdicts only counted and audited.

`policy` names the file (relative to the policy file's directory); `OPSGATE_SHADOW_POLICY`
overrides it. A change can so run beside the current policy for a week before it is switched
on, with `opsgate_shadow_differences_total` and the `shadow_differs` audit rows saying where
it would have decided otherwise.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, StrictStr

from ._model import Model

__all__ = ["ShadowSection"]


class ShadowSection(Model):
    policy: StrictStr | None = Field(default=None, min_length=1)

    def path(self, source: str) -> Path | None:
        """The shadow policy's file; a relative one is found beside `source`, the policy file."""
        if self.policy is None:
            return None
        path = Path(self.policy)
        base = Path(source).parent if Path(source).is_file() else Path.cwd()
        return path if path.is_absolute() else base / path
