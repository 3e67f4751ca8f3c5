"""The store on PostgreSQL, for several replicas sharing one database (asyncpg).

`PostgresStore` keeps the contract of `SQLiteStore`; the replica bookkeeping (instance leases)
is what it adds.
"""

from ._base import PostgresSchemaTooNew, redact
from ._recovery import DEFAULT_LEASE
from ._schema import SCHEMA_VERSION
from .store import PostgresStore

__all__ = ["DEFAULT_LEASE", "SCHEMA_VERSION", "PostgresSchemaTooNew", "PostgresStore", "redact"]
