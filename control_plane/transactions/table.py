"""The ``transactions`` control table: every version of each transactional id's row
(``state.TransactionRow``), kept for SQL (``transaction_history``; ``transactions`` is each id's
latest). A change is recorded with ``ControlTables.insert_versioned`` on the application id
``lakelog.txn.<transactional id>``: the row's version is read and raised in the row's own commit,
so of two writers of one version one wins, and a writer that read an older version loses."""

from __future__ import annotations

from control_plane.tables import ControlTables
from control_plane.transactions.state import TransactionRow
from log_store.names import commit_metadata

TABLE = "transactions"


def version_app_id(transactional_id: str) -> str:
    return f"lakelog.txn.{transactional_id}"


def latest_rows(rows: list[dict]) -> dict[str, TransactionRow]:
    """Each transactional id's latest version among the table's rows."""
    out: dict[str, dict] = {}
    for r in rows:
        tid = r["transactional_id"]
        if tid not in out or r["version"] > out[tid]["version"]:
            out[tid] = r
    return {tid: TransactionRow.of(r) for tid, r in out.items()}


class TransactionTable:
    """Reads and records transactional ids' rows under one root's control plane."""

    def __init__(self, tables: ControlTables) -> None:
        self.tables = tables

    def rows(self) -> list[dict]:
        """Every version of every id (none before the table's first row)."""
        return self.tables.rows(TABLE) if self.tables.exists(TABLE) else []

    def latest(self) -> dict[str, TransactionRow]:
        return latest_rows(self.rows())

    def get(self, transactional_id: str) -> TransactionRow | None:
        return self.latest().get(transactional_id)

    def history(self, transactional_id: str) -> list[TransactionRow]:
        """Every version of one id's row, oldest first."""
        found = [TransactionRow.of(r) for r in self.rows() if r["transactional_id"] == transactional_id]
        return sorted(found, key=lambda r: r.version)

    def record(self, row: TransactionRow) -> bool:
        """True if ``row`` became version ``row.version`` of its id: False if another writer
        recorded that version (or a later one) first."""
        self.tables.ensure_table(TABLE)
        return self.tables.insert_versioned(
            TABLE, version_app_id(row.transactional_id), row.version, row.row(),
            commit_metadata("transaction", transactional_id=row.transactional_id, version=row.version,
                            state=row.state.value, epoch=row.epoch))
