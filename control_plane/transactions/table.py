"""The ``transactions`` control table: versions of each transactional id's row
(``state.TransactionRow``), kept for SQL (``transaction_history``; ``transactions`` is each id's
latest). A change is recorded with ``ControlTables.insert_versioned`` on the application id
``lakelog.txn.<transactional id>``: the row's version is read and raised in the row's own commit,
so of two writers of one version one wins, and a writer that read an older version loses.

Reading one id's row costs the same whatever the table's history (where delta-rs reads the table:
a local or S3 root). Its current version is that application version, in the Delta snapshot kept
open between reads (``rs_tables``: brought up to date from the commits since); the row of that
version is found from the files' statistics (``version``, and ``transactional_id`` where Delta
keeps its bounds: up to 32 characters) and, within a file, the row groups' (``compaction``
writes files sorted by version), and kept in memory with the rows this process records: a
version's row never changes, so the next read of it reads no file. The table is
kept short by ``compaction`` (docs/design.md, Transactions)."""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from datetime import timezone
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from control_plane.tables import ControlTables
from control_plane.transactions.state import TransactionRow
from log_store.arrow_files import STRING_PREFIX, arrow_schema, fit_rows
from log_store.names import commit_metadata
from log_store.object_store import arrow_filesystem, delta_rs_reads
from log_store.rs_engine import RsTransaction

TABLE = "transactions"
PREFIX = "lakelog.txn."
KEPT_ROWS = 8_192  # (table, id, version) -> row kept in memory (a few KiB each), the least recently used go first

_KEPT: OrderedDict[tuple, TransactionRow | None] = OrderedDict()
_LOCK = threading.Lock()


def version_app_id(transactional_id: str) -> str:
    return f"{PREFIX}{transactional_id}"


def latest_rows(rows: list[dict]) -> dict[str, TransactionRow]:
    """Each transactional id's latest version among the table's rows."""
    out: dict[str, dict] = {}
    for r in rows:
        tid = r["transactional_id"]
        if tid not in out or r["version"] > out[tid]["version"]:
            out[tid] = r
    return {tid: TransactionRow.of(r) for tid, r in out.items()}


def _keep(key: tuple, row: TransactionRow | None) -> None:
    with _LOCK:
        _KEPT[key] = row
        _KEPT.move_to_end(key)
        while len(_KEPT) > KEPT_ROWS:
            _KEPT.popitem(last=False)


def may_hold(low, high, value) -> bool:
    """Whether statistics ``low``..``high`` (None: none kept) allow ``value``. A string bound of
    Delta's prefix length or more may be cut to a prefix: a cut minimum is at most the true one, and
    a cut maximum is compared as a prefix (a writer may or may not add a tie-breaker past it)."""
    if low is not None and value < low:
        return False
    if high is None:
        return True
    if isinstance(high, str) and len(high) >= STRING_PREFIX:
        return value[:len(high)] <= high
    return value <= high


def table_rows(table: pa.Table) -> list[dict]:
    """Rows as ``TransactionRow.of`` takes them: timestamps naive UTC (the project's convention)."""
    out = table.to_pylist()
    for r in out:
        at = r.get("changed_at")
        if at is not None and at.tzinfo is not None:
            r["changed_at"] = at.astimezone(timezone.utc).replace(tzinfo=None)
    return out


class TransactionTable:
    """Reads and records transactional ids' rows under one root's control plane. ``reads`` counts
    what lookups read (``files``, ``row_groups``, ``rows``): the measure that they do not grow."""

    def __init__(self, tables: ControlTables) -> None:
        self.tables = tables
        self.reads: Counter = Counter()
        self._table_id: str | None = None  # of the snapshot last read: the rows recorded are kept under it

    @property
    def path(self) -> str:
        return self.tables.path(TABLE)

    def rows(self) -> list[dict]:
        """Every row the table keeps, of every id (none before the table's first row)."""
        return self.tables.rows(TABLE) if self.tables.exists(TABLE) else []

    def latest(self) -> dict[str, TransactionRow]:
        """Each known id's latest row: by application version where delta-rs reads the table
        (``get``'s read for each), else from every row."""
        txn = self._snapshot()
        if txn is None:
            return latest_rows(self.rows()) if not self._direct() else {}
        try:
            versions = {app[len(PREFIX):]: v for app, v in txn.snapshot_app_versions().items() if app.startswith(PREFIX)}
            stats: list = []
            found = {tid: self._row_at(txn, tid, v, stats) for tid, v in sorted(versions.items())}
            return {tid: row for tid, row in found.items() if row is not None}
        finally:
            txn.release()

    def get(self, transactional_id: str) -> TransactionRow | None:
        return self.lookup(transactional_id)[0]

    def lookup(self, transactional_id: str) -> tuple[TransactionRow | None, int]:
        """The id's latest row (None: never initialised, or forgotten by ``compaction``'s expiry)
        and the version it is at (0: none), which the next row of the id must follow."""
        txn = self._snapshot()
        if txn is None:
            if self._direct():
                return None, 0
            row = self.latest().get(transactional_id)  # a root delta-rs does not read: every row
            return row, row.version if row else 0
        try:
            version = txn.app_version(version_app_id(transactional_id))
            return self._row_at(txn, transactional_id, version, []), max(version, 0)
        finally:
            txn.release()

    def history(self, transactional_id: str) -> list[TransactionRow]:
        """Every version of one id's row the table keeps, oldest first."""
        found = [TransactionRow.of(r) for r in self.rows() if r["transactional_id"] == transactional_id]
        return sorted(found, key=lambda r: r.version)

    def record(self, row: TransactionRow) -> bool:
        """True if ``row`` became version ``row.version`` of its id: False if another writer
        recorded that version (or a later one) first."""
        self.tables.ensure_table(TABLE)
        done = self.tables.insert_versioned(
            TABLE, version_app_id(row.transactional_id), row.version, row.row(),
            commit_metadata("transaction", transactional_id=row.transactional_id, version=row.version,
                            state=row.state.value, epoch=row.epoch))
        if done and self._table_id is not None:  # a table made again since is another id: never found under it
            _keep((self.path, self._table_id, row.transactional_id, row.version), row)
        return done

    def forget(self, ids) -> None:
        """Drop the rows kept in memory of ``ids`` (forgotten by ``compaction``)."""
        gone = set(ids)
        with _LOCK:
            for key in [k for k in _KEPT if k[0] == self.path and k[2] in gone]:
                del _KEPT[key]

    # -- reading one version's row ------------------------------------------------------------------
    def _direct(self) -> bool:
        return delta_rs_reads(self.tables.spark, self.path)[0]

    def _snapshot(self) -> RsTransaction | None:
        """A read-only transaction on the table's newest snapshot (release it), where delta-rs reads
        the table; None there before the table's first row, and on roots it does not read."""
        here, storage = delta_rs_reads(self.tables.spark, self.path)
        if not here:
            return None
        self.tables.check_format()
        if not self.tables.exists(TABLE):  # a commit listed: a table being made has none yet
            return None
        return RsTransaction.start(self.path, storage)

    def _row_at(self, txn: RsTransaction, tid: str, version: int, stats: list) -> TransactionRow | None:
        """The id's row of ``version`` (None if the table keeps none): kept, or read from the files
        that may hold it. ``stats``: the snapshot's file statistics, read once for many ids."""
        if version < 1:
            return None
        self._table_id = txn.table_id()
        key = (self.path, self._table_id, tid, version)
        with _LOCK:
            if key in _KEPT:
                _KEPT.move_to_end(key)
                return _KEPT[key]
        if not stats:
            stats.append(txn.file_stats())
        found = [r for r in self._read(txn, stats[0], tid, version) if r["transactional_id"] == tid]
        row = TransactionRow.of(found[0]) if found else None
        _keep(key, row)
        return row

    def _read(self, txn: RsTransaction, stats: pa.Table, tid: str, version: int) -> list[dict]:
        """The rows of ``tid`` at ``version`` in the files, and their row groups, whose statistics
        allow them."""
        def column(name: str) -> list:
            return stats.column(name).to_pylist() if name in stats.column_names else [None] * stats.num_rows

        paths, low_id, high_id = column("path"), column("min.transactional_id"), column("max.transactional_id")
        low_v, high_v = column("min.version"), column("max.version")
        chosen = [p for p, a, b, c, d in zip(paths, low_id, high_id, low_v, high_v)
                  if may_hold(a, b, tid) and may_hold(c, d, version)]
        fs, root = arrow_filesystem(self.path, txn.storage)
        schema, required = arrow_schema(txn.schema_json())
        out: list[dict] = []
        for path in chosen:
            self.reads["files"] += 1
            with fs.open_input_file(f"{root}/{unquote(path)}") as f:
                groups = row_groups(pq.ParquetFile(f), tid, version)
                self.reads["row_groups"] += len(groups[1])
                if not groups[1]:
                    continue
                part = groups[0].read_row_groups(groups[1])
            self.reads["rows"] += part.num_rows
            part = part.filter(pc.and_(pc.equal(part.column("transactional_id"), tid),
                                       pc.equal(part.column("version"), version)))
            part = part.select([n for n in part.column_names if n in schema.names])
            out.extend(table_rows(fit_rows(part, schema, required, self.path)))
        return out


def row_groups(parquet: pq.ParquetFile, tid: str, version: int) -> tuple[pq.ParquetFile, list[int]]:
    """The row groups of a file whose statistics allow ``tid`` at ``version``."""
    meta = parquet.metadata
    index = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
    wanted = []
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        ok = True
        for name, value in (("transactional_id", tid), ("version", version)):
            at = index.get(name)
            st = group.column(at).statistics if at is not None else None
            if st is not None and st.has_min_max and not may_hold(st.min, st.max, value):
                ok = False
        if ok:
            wanted.append(g)
    return parquet, wanted
