"""The shape of the Slack layer's listeners: each a bound method registered from the one table,
none a closure tools and tests cannot reach, and none reaching through the run service into
its parts (one call per click)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from bot.policy import Policy
from bot.slack.listeners import routes

SLACK = Path(__file__).resolve().parents[2] / "bot" / "slack"


def test_no_listener_is_a_decorated_function_nested_in_another() -> None:
    nested: list[str] = []
    for path in sorted((SLACK / "listeners").glob("*.py")):
        for outer in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(outer, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for inner in ast.walk(outer):
                if inner is outer or not isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                if inner.decorator_list:
                    nested.append(f"{path.name}:{outer.name}.{inner.name}")
    assert nested == []


def test_every_click_listener_is_a_method_of_its_class() -> None:
    table = routes(None, None, policy=Policy.from_toml(""))  # type: ignore[arg-type]
    for route in table:
        if route.kind in ("action", "view", "command", "shortcut"):
            owner = getattr(route.listener, "__self__", None)
            assert owner is not None, f"{route.key!r} is not a bound method"
    clicks = [(route.kind, route.key) for route in table if route.kind != "event"]
    assert len(clicks) == len(set(clicks)), "an action, view or command is registered twice"


def test_the_slack_layer_makes_one_call_of_the_service() -> None:
    reach = re.compile(r"service\.[a-z_]+\.[a-z_]+|service\.ctx\.")
    found = [
        f"{path.relative_to(SLACK)}:{number}"
        for path in sorted(SLACK.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if reach.search(line)
    ]
    assert found == []
