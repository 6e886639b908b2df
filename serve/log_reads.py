"""A server's reads of topic logs with delta-rs, each log's table kept open between reads and
moved to the version a read asks for (opening one replays its Delta log: tens of ms, more as the
log grows)."""

from __future__ import annotations

import threading

import pyarrow as pa

from log_store import rs_reader
from log_store.rs_tables import open_table
from deltalake import DeltaTable, QueryBuilder


class LogReads:
    def __init__(self) -> None:
        self._tables: dict[str, tuple[DeltaTable, threading.Lock]] = {}
        self._lock = threading.Lock()

    def _table(self, path: str, storage: rs_reader.Storage = None) -> tuple[DeltaTable, threading.Lock]:
        with self._lock:
            hit = self._tables.get(path)
            if hit is None:
                hit = (open_table(path, storage), threading.Lock())
                self._tables[path] = hit
            return hit

    def offset_ranges(self, path: str, version: int, spans: list[tuple[int, int, int]], columns: list[str],
                      storage: rs_reader.Storage = None, optional: list[str] = ()) -> pa.Table:
        """As ``log_store.rs_reader.offset_ranges``, on the kept table (``storage``: an S3 root's
        delta-rs storage options, ``object_store.delta_rs_reads``); ``optional``: more columns,
        read where the table has them (at ``version``)."""
        table, lock = self._table(path, storage)
        where = " OR ".join(f'("partition" = {int(p)} AND "offset" >= {int(s)} AND "offset" < {int(e)})'
                            for p, s, e in spans)
        with lock:
            if table.version() != version:
                table.load_as_version(version)
            if optional:
                present = set(table.schema().to_arrow().names)
                columns = [*columns, *(c for c in optional if c in present)]
            names = ", ".join(f'"{c}"' for c in columns)
            return rs_reader.arrow_table(QueryBuilder().register("t", table).execute(
                f'SELECT {names} FROM t WHERE {where} ORDER BY "partition", "offset"'))

    def forget(self, path: str) -> None:
        with self._lock:
            self._tables.pop(path, None)
