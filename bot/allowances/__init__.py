"""Time-boxed allowances: which later calls an "Allow for <duration>" click covers.

`offered_shapes` lists the shapes a call on a card may be allowed as (the exact argv first, then
argv prefixes with no option before their last fixed word, or the rule's `allow_prefix`), each
with examples it covers and does not (`examples_for`), for the granter to choose from and see;
`shape_of` is the one a click without a choice creates. `covers` decides a later call against a
stored shape (`load_shape`; `dump_shape` writes it). The store keeps the allowances
(`Store.create_allowance`, `active_allowances`, `revoke_allowance`); the run service's gate
(`bot.runs.edits`) applies them. See `docs/architecture.md`.
"""

from __future__ import annotations

from ._shape import (
    ArgvShape,
    ExactShape,
    Shape,
    covers,
    dump_shape,
    examples_for,
    load_shape,
    offered_shapes,
    shape_of,
)

__all__ = [
    "ArgvShape",
    "ExactShape",
    "Shape",
    "covers",
    "dump_shape",
    "examples_for",
    "load_shape",
    "offered_shapes",
    "shape_of",
]
