"""Reading lakelog's Delta tables without a JVM (delta-rs), for the read-only commands.

A command such as ``topics list`` needs a few small reads; starting Spark's JVM for them takes
longer than the reads. delta-rs reads the same tables: rows, table properties, set-transaction
versions (the log ends) and the table id. Only reads: every write stays with Spark and Delta's
own transactions.
"""

from __future__ import annotations

from pathlib import Path
import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder

from log_store.files import is_remote
from log_store.topic_log import (
    TOPIC_VERSION_PROP,
    LogSnapshot,
    TopicLogMetadata,
    check_set_transactions_kept,
    log_end,
    log_end_app_id,
)


def exists(path: str) -> bool:
    if is_remote(path):
        return DeltaTable.is_deltatable(path)
    return Path(path, "_delta_log").is_dir()


def rows(path: str) -> list[dict]:
    """Every current row of the table at ``path`` (none if there is no table). Maps come as
    lists of (key, value) pairs, as Arrow has them."""
    if not exists(path):
        return []
    # Through delta-rs's query engine, not to_pyarrow_table(): with deltalake 1.6.6 and pyarrow 17
    # a process that scanned a pyarrow dataset aborts at exit about half the time ("terminate
    # called without an active exception", exit 134), which would fail a read command.
    reader = QueryBuilder().register("t", DeltaTable(path)).execute("SELECT * FROM t")
    return pa.table(reader.read_all()).to_pylist()


def log_snapshot(path: str) -> tuple[LogSnapshot, str]:
    """A topic log's snapshot (metadata and log ends, as ``TopicLog.snapshot`` reads them) and its table id."""
    table = DeltaTable(path)
    meta = table.metadata()
    conf = dict(meta.configuration)
    check_set_transactions_kept(conf, path)
    metadata = TopicLogMetadata.from_properties(conf)
    known = {}
    for p in metadata.partitions:
        version = table.transaction_version(log_end_app_id(p))
        if version is not None:
            known[log_end_app_id(p)] = version
    snap = LogSnapshot(
        version=table.version(), topic_version=int(conf.get(TOPIC_VERSION_PROP, "1")), metadata=metadata,
        log_ends={p: log_end(known, p, pm.start_offset) for p, pm in metadata.partitions.items()},
    )
    return snap, meta.id
