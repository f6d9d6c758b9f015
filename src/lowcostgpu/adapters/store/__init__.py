"""The store adapters: `SqlStore` (SQLite, PostgreSQL) and `MemoryStore` (the in-memory fake).

Both implement `lowcostgpu.ports.store.Store` with the same semantics, versions and `StaleWrite`
included; one test suite (`tests/adapters/store`) runs against each.
"""

from lowcostgpu.adapters.store.errors import StoreDataError, StoreUnavailable
from lowcostgpu.adapters.store.memory import MemoryStore
from lowcostgpu.adapters.store.sql import SqlStore

__all__ = ["MemoryStore", "SqlStore", "StoreDataError", "StoreUnavailable"]
