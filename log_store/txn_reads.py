"""What a reader of a log with transactions delivers (docs/concepts.md, isolation levels), without
Spark: never a marker (a row whose ``control`` column is set); under ``read_committed``, only up
to the last stable offset (``LogSnapshot.stable_end``) and none of an aborted transaction's
records. Aborted records are found as Kafka's consumer finds them: from the abort markers at and
after the batch's start (``txn_marks.aborted_spans``), each dropping its producer's records since
the producer's marker before it. Offsets of markers and aborted records are gaps the reader's
position moves past, as key compaction's are.

The same spans filter a batch read with delta-rs (DataFusion's SQL) and one read by Spark: one
predicate, written in each dialect's quoting (``aborted_predicate``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import pyarrow as pa

from log_store.txn_marks import CONTROL_COLUMN, AbortedSpan, Marker, aborted_spans

if TYPE_CHECKING:
    from log_store.log_metadata import LogSnapshot
    from log_store.topic_log import TopicLog

# Kafka's isolation levels: "read_uncommitted" (the default) delivers every record, open and
# aborted transactions' too; this one stops at the last stable offset and drops aborted ones.
READ_COMMITTED = "read_committed"

Ranges = Mapping[int, tuple[int, int]]
Spans = Mapping[int, list[AbortedSpan]]
LOG_END = 2**62  # an offset past any log's end: a read "to the end" of a snapshot


def records_predicate(quote: str = '"') -> str:
    """True for a record, false for a marker (``control`` null on records)."""
    return f"{quote}{CONTROL_COLUMN}{quote} IS NULL"


MARKER_COLUMNS = ["partition", "offset", "producer_id", CONTROL_COLUMN]


def no_markers() -> pa.Table:
    """An empty table of markers (``MARKER_COLUMNS``)."""
    return pa.table({"partition": pa.array([], pa.int32()), "offset": pa.array([], pa.int64()),
                     "producer_id": pa.array([], pa.string()), CONTROL_COLUMN: pa.array([], pa.string())})


def markers_of(rows: pa.Table) -> dict[int, list[Marker]]:
    """Per partition, the markers among ``rows`` (with partition, offset, producer_id, control)."""
    out: dict[int, list[Marker]] = {}
    for p, o, pid, kind in zip(*(rows.column(c).to_pylist() for c in ("partition", "offset", "producer_id",
                                                                       CONTROL_COLUMN))):
        if kind is not None:
            out.setdefault(int(p), []).append(Marker(int(o), pid, kind == "commit"))
    return out


def spans_of(markers: Mapping[int, list[Marker]]) -> dict[int, list[AbortedSpan]]:
    """Per partition, its aborted transactions' spans (``txn_marks.aborted_spans``); partitions
    without an abort are absent."""
    found = {p: aborted_spans(ms) for p, ms in markers.items()}
    return {p: spans for p, spans in found.items() if spans}


def aborted_predicate(spans: Spans, quote: str = '"') -> str | None:
    """A SQL predicate true for the records of ``spans`` (aborted transactions), in DataFusion's
    quoting (``"``) or Spark's (`````); None when there are none. False, never null, on a record
    without a producer id: its reader's ``NOT`` keeps it."""
    q = quote
    terms = [f"({q}partition{q} = {int(p)} AND producer_id IS NOT NULL AND producer_id = {_literal(s.producer)} "
             f"AND {q}offset{q} > {int(s.after)} "
             f"AND {q}offset{q} < {int(s.marker)})" for p, ss in sorted(spans.items()) for s in ss]
    return " OR ".join(terms) if terms else None


def transactional_partitions(ranges: Ranges, marks: Mapping[int, Mapping[str, int]]) -> dict[int, tuple[int, int]]:
    """The ``ranges`` of partitions some transactional producer wrote to (``LogSnapshot.txn_marks``):
    the only ones a read_committed reader looks for aborts in."""
    return {p: r for p, r in ranges.items() if marks.get(p) and r[1] > r[0]}


def aborted_in(log: "TopicLog", ranges: Ranges, snap: "LogSnapshot", quote: str = '"') -> str | None:
    """The predicate (``aborted_predicate``, in ``quote``'s dialect) of the aborted transactions'
    records in ``ranges`` of ``log`` at ``snap``'s version; None when there are none."""
    return aborted_predicate(aborted_spans_in(log.markers, ranges, snap), quote)


def aborted_spans_in(markers: Callable[[Ranges, int], pa.Table], ranges: Ranges, snap: "LogSnapshot") -> Spans:
    """The aborted transactions' spans (``spans_of``) over ``ranges`` at ``snap``'s version, whose
    markers ``markers(ranges, version)`` reads (``TopicLog.markers``, ``rs_reader.log_markers``).
    The markers are read from each range's start to the log end: the one ending a record's
    transaction may lie past the range, even past the last stable offset."""
    txn = transactional_partitions(ranges, snap.txn_marks or {})
    if not txn:
        return {}
    return spans_of(markers_of(markers({p: (s, LOG_END) for p, (s, _e) in txn.items()}, snap.version)))


def stable_view(snap: "LogSnapshot") -> "LogSnapshot":
    """``snap`` as a read_committed reader sees it: each log end at the partition's last stable
    offset (``LogSnapshot.stable_end``), where its reads, ``latest`` and being caught up stop."""
    return snap.model_copy(update={"log_ends": {p: snap.stable_end(p) for p in snap.log_ends}})


def aborted_rows(rows: pa.Table, spans: list[AbortedSpan]) -> pa.Array:
    """Which of one partition's ``rows`` (``offset``, ``producer_id``) the aborted transactions of
    ``spans`` wrote: the same rule as ``aborted_predicate``, on rows in memory."""
    import pyarrow.compute as pc

    out = pa.array([False] * rows.num_rows, pa.bool_())
    offsets, producers = rows.column("offset"), rows.column("producer_id")
    for s in spans:
        hit = pc.and_(pc.equal(producers, s.producer), pc.and_(pc.greater(offsets, s.after), pc.less(offsets, s.marker)))
        out = pc.or_(out, pc.fill_null(hit, False))
    return out


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
