"""`docs/architecture.md`'s decision core stays true: each step of the Approve-click walk names
a file that exists and the function that runs there, and the walk stays short enough to read
(at most 15 files, the store's included)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_FILES = 15
_STEP = re.compile(r"^\d+\. `(?P<path>[\w/]+\.py)` `(?P<function>\w+(?:\.\w+)?)`", re.M)


def _walk() -> list[tuple[str, str]]:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    start = text.index("### The decision core: one Approve click")
    end = text.index("\nSide walks:", start)
    return [(m["path"], m["function"]) for m in _STEP.finditer(text[start:end])]


def _defines(path: Path, function: str) -> bool:
    """Whether the module defines `function`, or `Class.method` (a method of its own class)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    owner, _, name = function.rpartition(".")
    scope: list[ast.stmt] = tree.body
    if owner:
        classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == owner]
        if not classes:
            return False
        scope = classes[0].body
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name
        for node in scope
    )


def test_the_decision_core_walk_is_short() -> None:
    walk = _walk()
    assert len(walk) >= 10, "the walk was not found whole"
    assert len({path for path, _ in walk}) <= MAX_FILES


def test_each_step_names_a_file_that_defines_its_function() -> None:
    missing = [
        f"{path} {function}"
        for path, function in _walk()
        if not (ROOT / path).is_file() or not _defines(ROOT / path, function)
    ]
    assert missing == []


def test_a_step_naming_what_is_not_there_is_found(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("class A:\n    async def b(self) -> None: ...\n\ndef c() -> None: ...\n")
    assert _defines(module, "A.b") and _defines(module, "c")
    assert not _defines(module, "A.c") and not _defines(module, "b") and not _defines(module, "B.b")
