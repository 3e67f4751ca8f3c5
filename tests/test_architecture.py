"""`docs/architecture.md` held to the tree: the concept table names every module of the layers
that grow one module per feature, and nothing that is not there; the bot's exception tree
stays in one module per package; the decision core's walk of an Approve click names files
that exist and the function that runs in each, at most 15 files (the store's included)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.test_smoke import import_targets

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
COLUMNS = {
    "policy": "bot/policy",
    "tools": "bot/tools",
    "store": "bot/store",
    "runs": "bot/runs",
    "slack": "bot/slack",
    "slack/listeners": "bot/slack/listeners",
    "cli": "bot/cli",
}
LISTED = ("runs", "slack", "slack/listeners", "store")
"""The layers whose every module must be in the table (their folders, not their subpackages)."""


def _table() -> list[dict[str, str]]:
    """The rows of the table under "## Concepts", each as {column: cell}."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("\n## Concepts\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [
        dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=True))
        for line in lines[2:]
    ]


def _named(rows: list[dict[str, str]], column: str) -> set[str]:
    return {name for row in rows for name in re.findall(r"`([^`]+)`", row[column])}


def test_the_table_has_the_layers_as_columns() -> None:
    rows = _table()
    assert rows, "no concept table under '## Concepts' in docs/architecture.md"
    assert set(rows[0]) == {"concept", *COLUMNS}


def test_each_concept_has_one_row() -> None:
    concepts = [row["concept"] for row in _table()]
    assert len(concepts) == len(set(concepts)), sorted(c for c in concepts if concepts.count(c) > 1)


def test_every_module_of_the_growing_layers_is_in_the_table() -> None:
    rows = _table()
    missing = {
        column: sorted(
            path.name
            for path in (ROOT / COLUMNS[column]).glob("*.py")
            if path.name != "__init__.py" and path.name not in _named(rows, column)
        )
        for column in LISTED
    }
    assert not any(missing.values()), (
        "modules not in the concept table of docs/architecture.md (add each to its concept's "
        f"row, or a row for a new concept): { {k: v for k, v in missing.items() if v} }"
    )


def test_every_file_the_table_names_exists() -> None:
    rows = _table()
    absent = sorted(
        f"{COLUMNS[column]}/{name}"
        for column in COLUMNS
        for name in _named(rows, column)
        if not (ROOT / COLUMNS[column] / name).exists()
    )
    assert not absent, f"docs/architecture.md's concept table names files that are gone: {absent}"


def _bot_errors() -> dict[Path, set[str]]:
    """Each module of `bot` with the `BotError` subclasses it defines (read, not imported)."""
    bases: dict[str, set[str]] = {}
    defined: dict[Path, set[str]] = {}
    for path in sorted((ROOT / "bot").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                names = {ast.unparse(base).rpartition(".")[2] for base in node.bases}
                bases.setdefault(node.name, set()).update(names)
                defined.setdefault(path, set()).add(node.name)
    tree = {"BotError"}
    while grown := {name for name, of in bases.items() if of & tree} - tree:
        tree |= grown
    return {path: names & tree for path, names in defined.items() if names & tree}


def test_one_module_per_package_holds_its_exception_tree() -> None:
    packages: dict[Path, list[str]] = {}
    for path in _bot_errors():
        packages.setdefault(path.parent, []).append(path.name)
    crowded = {str(p.relative_to(ROOT)): m for p, m in packages.items() if len(m) > 1}
    assert not crowded, f"exception classes spread over several modules of a package: {crowded}"


def test_the_bot_tree_is_found() -> None:
    """The check above reads class bases by name: it must find the tree it guards."""
    found = _bot_errors()
    assert {"PolicyError", "McpConfigError"} <= found[ROOT / "bot" / "errors.py"]
    assert "StoreError" in found[ROOT / "bot" / "store" / "errors.py"]


# -- the decision core's walk ---------------------------------------------------------------

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


def _layers() -> list[list[str]]:
    """The layer order the document gives ("Imports run one way, down this order: ..."), each
    layer as the dotted modules or packages it holds, highest first."""
    text = " ".join(DOC.read_text(encoding="utf-8").split())
    order = text.split("Imports run one way, down this order:", 1)[1].split(". A lower layer", 1)[0]
    layers = []
    for step in order.split("→"):
        names = []
        for written in re.findall(r"`([^`]+)`", step):
            path = written.rstrip("/").removesuffix(".py")
            names.append(path.replace("/", ".") if "/" in written else f"bot.{path}")
        layers.append(names)
    return layers


def _layer_of(module: str, layers: list[list[str]]) -> tuple[int, str] | None:
    for rank, names in enumerate(layers):
        for name in names:
            if module == name or module.startswith(name + "."):
                return rank, name
    return None


def _imports(path: Path, module: str) -> list[tuple[int, str]]:
    """Every module `path` imports, with its line: at the top, in functions and under
    `TYPE_CHECKING` alike (a type-only import up a layer is still a layer known from below)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        (node.lineno, target)
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for target in import_targets(node, package)
    ]


def test_the_layer_order_names_every_top_level_part() -> None:
    layers = _layers()
    tops = {
        f"bot.{p.stem}" if p.is_file() else f"bot.{p.name}"
        for p in (ROOT / "bot").iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()
    }
    assert not {top for top in tops if _layer_of(top, layers) is None}
    assert _layer_of("agent_core", layers) is not None


def test_no_import_runs_back_up_a_layer() -> None:
    """The rule the document states: a lower layer takes what it needs of a higher one as a value
    or a protocol, never by import."""
    layers = _layers()
    upward = []
    for path in sorted([*(ROOT / "bot").rglob("*.py"), *(ROOT / "agent_core").rglob("*.py")]):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mine = _layer_of(module, layers)
        for line, target in _imports(path, module):
            theirs = _layer_of(target, layers)
            if mine and theirs and theirs[1] != mine[1] and theirs[0] < mine[0]:
                upward.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not upward, upward
