"""The database seam (`bot.store.db`): named parameters numbered for PostgreSQL once per SQL
string, and the one implementation writing the same audit rows on both databases."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path
from typing import Any

import bot.store.db
from bot.store import AuditRow, open_store
from bot.store.db import numbered
from bot.store.schema import steps
from tests.support.postgres import postgres_cluster, postgres_url

__all__ = ["postgres_cluster", "postgres_url"]  # fixtures the cross-backend test uses

_MAKER = Path(__file__).resolve().parents[1] / "fixtures" / "store" / "make_old_release.py"


def test_named_parameters_become_numbered_ones_in_order_of_first_use() -> None:
    sql, names = numbered("UPDATE t SET a = :x, b = :y WHERE id = :id AND (a = :x OR c = :other)")
    assert sql == "UPDATE t SET a = $1, b = $2 WHERE id = $3 AND (a = $1 OR c = $4)"
    assert names == ("x", "y", "id", "other")


def test_quoted_literals_and_casts_are_left_alone() -> None:
    sql, names = numbered(
        "SELECT * FROM t WHERE drawn LIKE 'pending:%' AND note = 'a :b' "
        "AND CAST(:me AS text) IS NULL AND v::text = :v"
    )
    assert sql == (
        "SELECT * FROM t WHERE drawn LIKE 'pending:%' AND note = 'a :b' "
        "AND CAST($1 AS text) IS NULL AND v::text = $2"
    )
    assert names == ("me", "v")


def test_numbering_is_computed_once_per_sql_string() -> None:
    text = "SELECT :only_here_once"
    before = numbered.cache_info().hits
    assert numbered(text) is numbered(text)
    assert numbered.cache_info().hits == before + 1


def test_no_migration_statement_holds_a_named_parameter() -> None:
    """The store's core runs the migrations through `Tx.execute`, which on PostgreSQL numbers
    each `:name`: a statement must read the same after numbering."""
    for dialect in ("sqlite", "postgresql"):
        for version, statements in steps(dialect, 0):
            for statement in statements:
                if isinstance(statement, str):
                    assert numbered(statement) == (statement, ()), (dialect, version)


def test_the_adapters_never_import_the_schema() -> None:
    """The store's core migrates (`StoreCore._migrate`); an adapter only reads and records
    its version, so the seam and its adapters do not import `schema/` back."""
    folder = Path(bot.store.db.__file__).parent
    for path in (folder / "db.py", folder / "sqlite.py", folder / "postgres.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                module = "." * node.level + (node.module or "")
                assert "schema" not in module.split("."), (path.name, module)
            elif isinstance(node, ast.Import):
                assert not any("schema" in a.name.split(".") for a in node.names), path.name


_IDS = {"ledger_id", "batch_id", "allowance_id", "queue_item", "ledger_ids", "interrupted"}


def _comparable(row: AuditRow) -> tuple[Any, ...]:
    """An audit row without what differs by chance (random ids, the row id)."""
    details = {k: v for k, v in row.details.items() if k not in _IDS}
    return row.at, row.event, row.actor, row.call_id, sorted(row.details), details


async def test_both_databases_write_the_same_audit_rows(tmp_path: Path, postgres_url: str) -> None:
    """The old-release script (every kind of write: pause, N-of-M, edit, allow, run, cancel,
    queue, inbox) run through today's code on each database: the audit logs agree."""
    spec = importlib.util.spec_from_file_location("make_old_release", _MAKER)
    assert spec is not None and spec.loader is not None
    maker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(maker)
    db = tmp_path / "opsgate.db"
    logs = []
    for target in (str(db), postgres_url):
        await maker.fill(target)
        async with open_store(target) as store:
            logs.append([_comparable(row) for row in await store.audit_rows()])
    sqlite_log, postgres_log = logs
    assert len(sqlite_log) == 17
    assert postgres_log == sqlite_log
