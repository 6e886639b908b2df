"""A fetch's side of transactions, as a Kafka 4.x broker answers one (docs/serve.md, Transactions):
a transaction's records in transactional batches of their Kafka producer id (``serve.txn_ids``)
and epoch, each marker in a control batch, never as a record; a read_committed fetch (or
ListOffsets) ends at the last stable offset (``LogSnapshot.stable_end``) and names the aborted
transactions overlapping what it returns, from which the client drops their records itself.
Partitions no transactional producer wrote to (no mark in the snapshot) are read as before: no
extra columns, no markers looked for."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from log_store.topic_log import TopicLog
from log_store.txn_marks import CONTROL_COLUMN
from log_store.txn_reads import LOG_END, markers_of, spans_of
from serve.producers import EPOCH_SHIFT
from serve.records import TxnRows
from serve.txn_ids import kafka_producer_id

if TYPE_CHECKING:
    from serve.context import TopicView
    from serve.server import Server

READ_COMMITTED = 1  # Fetch's and ListOffsets' isolation_level (0: read_uncommitted)
TXN_COLUMNS = ["producer_id", "sequence", CONTROL_COLUMN]
TXN_SCHEMA = pa.schema([("producer_id", pa.string()), ("sequence", pa.int64()), (CONTROL_COLUMN, pa.string())])
_EPOCHS = 1 << 15  # Kafka's producer epochs are int16


def producers_in(view: "TopicView", partition: int) -> dict[str, int]:
    """The transactional producers' marks of ``partition`` (lakelog producer id -> mark; empty:
    none ever wrote a transaction there)."""
    return (view.snapshot.txn_marks or {}).get(partition, {})


def stable_offset(view: "TopicView", partition: int, high: int) -> int:
    """Kafka's LastStableOffset of ``partition``: its last stable offset, at most the high watermark."""
    return min(high, view.snapshot.stable_end(partition))


def read_end(view: "TopicView", partition: int, high: int, isolation: int) -> int:
    """Where a fetch of ``partition`` at ``isolation`` may read to: the high watermark, or for
    read_committed the last stable offset."""
    return stable_offset(view, partition, high) if isolation == READ_COMMITTED else high


def txn_rows(rows: pa.Table, producers: dict[str, int]) -> TxnRows:
    """What ``rows`` (one partition's, with ``TXN_COLUMNS``) carry of transactions: a row of a
    transactional producer (one in ``producers``) or a marker has its Kafka producer id and an
    epoch (from a Kafka producer's sequence value, ``serve.producers``; else 0); others -1."""
    ids: dict[str, int] = {}
    pids, epochs = [], []
    controls = rows.column(CONTROL_COLUMN).to_pylist()
    for producer, seq, control in zip(rows.column("producer_id").to_pylist(), rows.column("sequence").to_pylist(),
                                      controls):
        if producer is None or (control is None and producer not in producers):
            pids.append(-1)
            epochs.append(-1)
            continue
        if producer not in ids:
            ids[producer] = kafka_producer_id(producer)
        pids.append(ids[producer])
        epoch = seq >> EPOCH_SHIFT if seq is not None and seq >= 0 else 0
        epochs.append(epoch if epoch < _EPOCHS else 0)
    return TxnRows(pids, epochs, controls)


def with_txn_columns(found: pa.Table) -> pa.Table:
    """``found`` with ``TXN_COLUMNS`` null where its log lacks them (a log of an earlier release
    has no ``control`` column until its first marker)."""
    for field in TXN_SCHEMA:
        if field.name not in found.column_names:
            found = found.append_column(field, pa.nulls(found.num_rows, field.type))
    return found


def aborted_transactions(server: "Server", view: "TopicView", served: dict[int, tuple[int, int]]) -> dict[int, list]:
    """Per partition of ``served`` (partition -> [first, end) of what a read_committed fetch
    returns), Kafka's AbortedTransactions: (producer id, first offset) of each aborted transaction
    with records in the span, its first offset the one after its producer's marker before it (0 if
    none is at or after ``first``: no record of it lies between). Markers are read from ``first``
    to the log end, as the abort ending a record's transaction may lie past the span
    (``txn_reads.spans_of``)."""
    wanted = {p: (s, LOG_END) for p, (s, e) in served.items() if e > s and producers_in(view, p)}
    if not wanted:
        return {}
    found = TopicLog(server.ctx.spark, view.record.location).markers(wanted, view.snapshot.version)
    out: dict[int, list] = {}
    for p, spans in spans_of(markers_of(found)).items():
        first, end = served[p]
        out[p] = [{"producer_id": kafka_producer_id(s.producer), "first_offset": s.after + 1}
                  for s in sorted(spans, key=lambda s: s.after) if s.marker > first and s.after + 1 < end]
    return out
