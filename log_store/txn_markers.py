"""A transaction's markers (Kafka's control records) written to a topic's log: one fenced commit
for the topic that ends the producer's transaction in each partition still holding it
(``txn_marks.marker_needed``): a control row at the partition's log end, the log end moved past
it, the mark closed at it and the partition's epoch raised past the ended one, so an append of
that transaction retried after its end is refused. The control row is told from a record by the
log's ``control`` column ("commit" / "abort"; null for records), added to a log made without it
the first time a marker is written (docs/design.md, Transactions)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import pyarrow as pa

from log_store.delta_errors import retry_on_conflict
from log_store.driver_rows import ROW_COLUMNS, number_rows
from log_store.errors import ConcurrentAppendError, ConcurrentCommitError, StorageError
from log_store.log_append import _commit_parts, open_append
from log_store.log_metadata import ARRIVAL, LAYOUT_PROP
from log_store.log_writers import write_arrival_rows, write_partitioned_rows
from log_store.rs_engine import RsTransaction
from log_store.txn_marks import closed_mark, marker_needed, txn_epoch_app_id, txn_mark_app_id

if TYPE_CHECKING:
    from log_store.topic_log import TopicLog

CONTROL_COLUMN = "control"  # "commit" / "abort" on a marker; null on a record


def has_control_column(txn) -> bool:
    """Whether the log of ``txn`` (as of its read version) has the ``control`` column."""
    return any(f["name"] == CONTROL_COLUMN for f in json.loads(txn.schema_json())["fields"])


def ensure_control_column(log: "TopicLog") -> None:
    """Add the nullable ``control`` column to a log made without it, in one metadata commit
    (every append open meanwhile conflicts with it and retries on the new schema); nothing when
    it is there. A racing adder's column is taken as made."""
    txn = log.rows_transaction()
    try:
        if has_control_column(txn):
            return
        rs = isinstance(txn, RsTransaction)
        storage = txn.storage if rs else None
    finally:
        txn.release()
    try:
        if rs:
            from deltalake import DeltaTable, Field

            DeltaTable(log.path, storage_options=storage).alter.add_columns(
                Field(CONTROL_COLUMN, "string", nullable=True))
        else:  # a store only Delta's engine commits to (through Spark)
            log.spark.sql(f"ALTER TABLE delta.`{log.path}` ADD COLUMNS ({CONTROL_COLUMN} STRING)")
    except Exception as exc:  # noqa: BLE001 - a racing adder made it first: fine if it is there
        again = log.rows_transaction()
        try:
            if not has_control_column(again):
                raise StorageError(f"the control column could not be added to the log at {log.path} ({exc}); "
                                   "no marker was written") from exc
        finally:
            again.release()


def write_markers(log: "TopicLog", producer_id: str, ended_epoch: int, commit: bool, partitions: list[int],
                  expected_count: int, max_retries: int = 20, backoff_ms: int = 50) -> dict[int, int | None]:
    """End ``producer_id``'s transaction of epoch ``ended_epoch`` in ``partitions`` (committed if
    ``commit``, else aborted) in one commit: each partition's marker offset, None where none was
    needed (written before, or the partition has seen a later epoch: a stale finisher closes
    nothing). Idempotent: a second call writes nothing. The commit depends on the log ends, marks
    and epochs it moves, so a concurrent append or marker makes it read them again."""
    ensure_control_column(log)
    kind = "commit" if commit else "abort"

    def attempt() -> dict[int, int | None]:
        txn, conf, meta, writable, known, bases = open_append(log, expected_count, log.rows_transaction())
        needed = [p for p in sorted(set(partitions)) if marker_needed(known.get(txn_epoch_app_id(producer_id, p)), ended_epoch)]
        out: dict[int, int | None] = {p: None for p in partitions}
        if not needed:
            txn.release()
            return out
        if not has_control_column(txn):  # only ever added: a log whose column was taken away
            txn.release()
            raise StorageError(f"the log at {log.path} has no {CONTROL_COLUMN} column; no marker was written")
        rows = marker_rows(needed, producer_id, kind, txn.column("value").nullable)
        # a partition not writable is refused (InvalidPartitionMetadataError), nothing written
        table = number_rows(rows, bases, {p: meta.partitions[p].leader_epoch for p in writable}, meta.topic)
        offsets = dict(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist()))
        more = {}
        for p in needed:
            more[txn_mark_app_id(producer_id, p)] = closed_mark(offsets[p])
            more[txn_epoch_app_id(producer_id, p)] = ended_epoch + 1
        writer = write_arrival_rows if conf.get(LAYOUT_PROP) == ARRIVAL else write_partitioned_rows
        parts = writer(log.path, txn, table)
        _commit_parts(log, txn, meta, parts, bases, known, writable, {}, expected_count, producer_id,
                      more=more, kind=f"txn_{kind}")
        return out | {p: int(offsets[p]) for p in needed}

    try:
        return retry_on_conflict(attempt, attempts=max_retries + 1, backoff_ms=backoff_ms)
    except ConcurrentCommitError as exc:
        raise ConcurrentAppendError(f"the markers of producer {producer_id} lost to concurrent commits "
                                    f"{max_retries + 1} times ({exc}); write them again") from exc


def marker_rows(partitions: list[int], producer_id: str, kind: str, null_values: bool) -> pa.Table:
    """One control row per partition (``ROW_COLUMNS`` and ``control``): no key, no value (an empty
    one where the log's value column is NOT NULL, a log of an earlier release), no sequence."""
    n = len(partitions)
    now = datetime.now(timezone.utc)
    return pa.table({
        "partition": pa.array(partitions, pa.int32()), "key": pa.nulls(n, pa.binary()),
        "value": pa.nulls(n, pa.binary()) if null_values else pa.array([b""] * n, pa.binary()),
        "timestamp": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
        "producer_id": pa.array([producer_id] * n, pa.string()), "sequence": pa.nulls(n, pa.int64()),
        CONTROL_COLUMN: pa.array([kind] * n, pa.string()),
    }).select([c for c in ROW_COLUMNS if c != "headers"] + [CONTROL_COLUMN])
