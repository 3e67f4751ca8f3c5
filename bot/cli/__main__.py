"""`python -m bot.cli`: the same as the `opsgate` console script."""

from __future__ import annotations

from ._main import main

raise SystemExit(main())
