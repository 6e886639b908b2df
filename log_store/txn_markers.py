"""A transaction's markers (Kafka's control records) written to a topic's log: one fenced commit
for the topic that ends the producer's transaction in each partition still holding it
(``txn_marks.marker_needed``): a control row at the partition's log end, the log end moved past
it, the mark closed at it and the partition's epoch raised past the ended one, so an append of
that transaction retried after its end is refused. The control row is told from a record by the
log's ``control`` column ("commit" / "abort"; null for records): a log has it from its creation;
one of an earlier release gets it added by its first marker (docs/design.md, Transactions).

A transaction must always be endable, as Kafka's coordinator writes markers whatever became of a
partition: a read_committed reader waits below an open transaction's first offset, and the
producer id's epoch stays unfenced, until it ends. So a marker goes to every partition whose rows
are still in the log: a writable one, and a marked one (ReadOnly, draining before retirement),
where it lands past the final log end the mark fixed (readers stop there; the marker decides the
records below it, and a number grown back after retirement continues after it, a gap as key
compaction leaves). A retired partition's rows are purged, so nothing is left for a marker to
decide: its mark is closed and its epoch raised with no row written. A deleted topic is refused
(``TopicDeletedError``): its log is gone, and so is everything its transactions wrote."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import pyarrow as pa

from log_store.delta_errors import retry_on_conflict
from log_store.driver_rows import ROW_COLUMNS, number_rows
from log_store.errors import ConcurrentAppendError, ConcurrentCommitError, StorageError
from log_store.log_append import _commit_parts, open_append
from log_store.log_metadata import ARRIVAL, LAYOUT_PROP, Mode, log_end
from log_store.names import commit_metadata
from log_store.log_writers import write_arrival_rows, write_partitioned_rows
from log_store.rs_engine import RsTransaction
from log_store.txn_marks import (CONTROL_COLUMN, closed_mark, closed_without_marker, marker_needed,
                                 txn_epoch_app_id, txn_mark_app_id)

if TYPE_CHECKING:
    from log_store.topic_log import TopicLog


def has_control_column(txn) -> bool:
    """Whether the log of ``txn`` (as of its read version) has the ``control`` column."""
    return any(f["name"] == CONTROL_COLUMN for f in json.loads(txn.schema_json())["fields"])


ADD_COLUMN_ATTEMPTS = 5  # a metadata commit racing the add (delta-rs refuses to rebase over one) is tried again


def ensure_control_column(log: "TopicLog") -> None:
    """Add the nullable ``control`` column to a log made without it, in one metadata commit
    (every append open meanwhile conflicts with it and retries on the new schema); nothing when
    it is there. A racing adder's column is taken as made; a racing metadata commit (a resize, a
    property) makes the add try again on the table as it is then."""
    for attempt in range(ADD_COLUMN_ATTEMPTS):
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
            return
        except Exception as exc:  # noqa: BLE001 - a racing adder made it (checked next), or a racing commit
            if attempt == ADD_COLUMN_ATTEMPTS - 1:
                again = log.rows_transaction()
                try:
                    if not has_control_column(again):
                        raise StorageError(f"the control column could not be added to the log at {log.path} "
                                           f"({exc}); no marker was written") from exc
                finally:
                    again.release()


def write_markers(log: "TopicLog", producer_id: str, ended_epoch: int, commit: bool, partitions: list[int],
                  expected_count: int, max_retries: int = 20, backoff_ms: int = 50) -> dict[int, int | None]:
    """End ``producer_id``'s transaction of epoch ``ended_epoch`` in ``partitions`` (committed if
    ``commit``, else aborted) in one commit: each partition's marker offset, None where none was
    written (not needed: written before, or the partition has seen a later epoch, so a stale
    finisher closes nothing; or the partition is retired, its transaction ended without a row, or
    is not one of the topic's). Idempotent: a second call writes nothing. The commit depends on the
    log ends, marks and epochs it moves, so a concurrent append or marker makes it read them again.
    Writable and marked partitions take a marker (the module says why)."""
    ensure_control_column(log)
    kind = "commit" if commit else "abort"

    def attempt() -> dict[int, int | None]:
        txn, conf, meta, _writable, known, _bases = open_append(log, expected_count, log.rows_transaction())
        out: dict[int, int | None] = {p: None for p in partitions}
        needed = [p for p in sorted(set(partitions)) if p in meta.partitions
                  and marker_needed(known.get(txn_epoch_app_id(producer_id, p)), ended_epoch)]
        marked = [p for p in needed if meta.partitions[p].mode is not Mode.NONE]
        retired = [p for p in needed if meta.partitions[p].mode is Mode.NONE]
        if not needed:
            txn.release()
            return out
        if marked and not has_control_column(txn):  # only ever added: a log whose column was taken away
            txn.release()
            raise StorageError(f"the log at {log.path} has no {CONTROL_COLUMN} column; no marker was written")
        bases = {p: log_end(known, p, meta.partitions[p].start_offset) for p in needed}
        more = {txn_epoch_app_id(producer_id, p): ended_epoch + 1 for p in needed}
        for p in retired:
            closed = closed_without_marker(known.get(txn_mark_app_id(producer_id, p)), bases[p])
            if closed is not None:
                more[txn_mark_app_id(producer_id, p)] = closed
        rows = marker_rows(marked, producer_id, kind, txn.column("value").nullable)
        table = number_rows(rows, {p: bases[p] for p in marked},
                            {p: meta.partitions[p].leader_epoch for p in marked}, meta.topic)
        offsets = dict(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist()))
        for p in marked:
            more[txn_mark_app_id(producer_id, p)] = closed_mark(offsets[p])
        writer = write_arrival_rows if conf.get(LAYOUT_PROP) == ARRIVAL else write_partitioned_rows
        parts = writer(log.path, txn, table) if marked else []
        if parts:
            _commit_parts(log, txn, meta, parts, bases, known, marked, {}, expected_count, producer_id,
                          more=more, kind=f"txn_{kind}")
        else:  # retired partitions only: their marks and epochs move, no row
            txn.depend_on(list(more))
            txn.commit(more, commit_metadata(f"txn_{kind}", producer_id=producer_id,
                                             undeleted_partition_count=expected_count, ranges={}))
        return out | {p: int(offsets[p]) for p in marked}

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
