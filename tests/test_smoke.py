import ast
import importlib
import re
from pathlib import Path

import pytest

import agent_core


def test_public_api_is_sorted() -> None:
    assert agent_core.__all__ == sorted(agent_core.__all__)


@pytest.mark.parametrize("package", ["bot.cli", "bot.policy"])
def test_package_exports_are_sorted_and_exist(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__all__ == sorted(module.__all__)
    assert all(hasattr(module, name) for name in module.__all__)


ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agent_core", "bot")


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports at import time (not under TYPE_CHECKING)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for sub in ast.walk(node):
            targets: list[str] = []
            if isinstance(sub, ast.Import):
                targets = [alias.name for alias in sub.names]
            elif isinstance(sub, ast.ImportFrom):
                base = sub.module or ""
                if sub.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (sub.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [base] + [f"{base}.{alias.name}" for alias in sub.names]
            found.update(t for t in targets if t in known and t != name)
    return found


def test_no_import_cycles_between_modules() -> None:
    """Each layer imports downwards only (docs/architecture.md): a cycle is a wiring mistake."""
    modules = _modules()
    known = set(modules)
    graph = {name: _imports(name, path, known) for name, path in modules.items()}
    # A package's __init__ re-exporting its own modules is not a cycle between layers.
    for name in graph:
        graph[name] = {dep for dep in graph[name] if not name.startswith(dep + ".")}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                cycle = [*stack[stack.index(dep) :], dep]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def _code_lines(source: str) -> int:
    """Lines of code: not blank, not a comment, not part of a docstring (the house rule)."""
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            docstrings.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return sum(
        1
        for number, line in enumerate(source.splitlines(), 1)
        if line.strip() and not line.strip().startswith("#") and number not in docstrings
    )


def test_no_module_is_over_400_lines() -> None:
    long = {
        name: n
        for name, path in _modules().items()
        if (n := _code_lines(path.read_text(encoding="utf-8"))) > 400
    }
    assert long == {}


def test_agent_core_never_imports_slack_or_bot() -> None:
    for name, path in _modules().items():
        if not name.startswith("agent_core"):
            continue
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"^\s*(from|import) (slack_sdk|slack_bolt|bot)\b", text, re.M), name
