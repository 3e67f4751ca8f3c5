"""Time-boxed allowances: which later calls an "Allow for <duration>" click covers.

`shape_of` computes the shape of the call on the card (shown on the button's confirmation and
stored with the allowance); `load_shape` reads it back to match later calls. The store keeps the
allowances (`Store.create_allowance`, `active_allowances`, `revoke_allowance`); the run service's
gate (`bot.runs._allow`) applies them. See `docs/architecture.md`.
"""

from __future__ import annotations

from ._shape import CommandShape, ExactShape, Shape, dump_shape, load_shape, shape_of

__all__ = ["CommandShape", "ExactShape", "Shape", "dump_shape", "load_shape", "shape_of"]
