import __future__

import ast
import importlib
import io
import re
import tokenize
import types
from pathlib import Path

import pytest

import agent_core


def test_public_api_is_sorted() -> None:
    assert agent_core.__all__ == sorted(agent_core.__all__)


ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agent_core", "bot")
ALL_PACKAGES = sorted(
    ".".join(init.parent.relative_to(ROOT).parts)
    for package in PACKAGES
    for init in (ROOT / package).rglob("__init__.py")
)


@pytest.mark.parametrize("package", ALL_PACKAGES)
def test_every_public_name_of_a_package_is_exported(package: str) -> None:
    """httpx-style: `__all__` is sorted and is exactly the public names the package's namespace
    binds. Submodules (bound as attributes once imported) and `from __future__` features are
    not names the package defines; anything else public must be exported or made private."""
    module = importlib.import_module(package)
    exported = list(getattr(module, "__all__", []))
    assert exported == sorted(exported), f"{package}.__all__ is not sorted (plain sorted())"
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, __future__._Feature)
        and name != "TYPE_CHECKING"
        and not (isinstance(value, types.ModuleType) and value.__name__.startswith(package + "."))
    }
    assert set(exported) == public, f"{package}: exported {exported}, public {sorted(public)}"


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
            found.update(t for t in import_targets(sub, package) if t in known and t != name)
    return found


def import_targets(node: ast.AST, package: str) -> list[str]:
    """What an import statement in `package` names (a relative one resolved): each module, and
    for `from X import a` both `X` and `X.a`; [] for any other node."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        anchor = package.split(".")
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


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


MAX_CODE_LINES = 400


def code_lines(source: str) -> int:
    """Lines holding code: blank lines, comments and docstrings (module, class, function and
    attribute strings standing alone as a statement) are not counted."""
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            docstrings.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    code: set[int] = set()
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    skip |= {tokenize.ENCODING, tokenize.ENDMARKER}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in skip:
            code.update(range(token.start[0], token.end[0] + 1))
    return len(code - docstrings)


def test_code_lines_counts_code_only() -> None:
    source = (
        '"""Module docstring,\nover two lines."""\n\n# a comment\nimport os\n\n\n'
        'def f() -> str:\n    """Doc."""\n    x = 1  # trailing\n    return """a\nb"""\n\n'
        'X = 1\n"""Attribute docstring."""\n'
    )
    assert code_lines(source) == 6  # import, def, x =, the two lines of the string, X =


def test_no_module_is_over_400_lines_of_code() -> None:
    """The size rule: at most 400 lines of code per module (complexity is ruff's C901, 15)."""
    long = {
        name: n
        for name, path in _modules().items()
        if (n := code_lines(path.read_text(encoding="utf-8"))) > MAX_CODE_LINES
    }
    assert long == {}


def test_agent_core_never_imports_slack_or_bot() -> None:
    for name, path in _modules().items():
        if not name.startswith("agent_core"):
            continue
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"^\s*(from|import) (slack_sdk|slack_bolt|bot)\b", text, re.M), name
