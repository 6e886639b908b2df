"""A partition's side of transactions, without Spark: what its marks mean, its last stable
offset, who may append, when a marker is still to be written, and what a read_committed reader
delivers. Each partition keeps, per transactional producer id, two application versions of its log
table, set in the commits that move its rows (``txn_mark_app_id``, ``txn_epoch_app_id``):

- the **mark**: ``2 * first + 1`` while a transaction of the producer is open in the partition,
  its first record at offset ``first``; ``2 * marker + 2`` once the transaction's marker is at
  offset ``marker``. Offsets only grow, so the mark only rises, as Delta's application versions
  must; and the last stable offset needs no scan of the rows.
- the **epoch**: the highest producer epoch the partition has seen for the producer id.

The coordinator's side is ``control_plane.transactions``.
"""

from __future__ import annotations

from typing import Iterable, Mapping, NamedTuple

CONTROL_COLUMN = "control"  # a log row's: "commit" / "abort" on a marker (a control record); null on a record
TXN_MARK_PREFIX = "lakelog.txn.mark."
TXN_EPOCH_PREFIX = "lakelog.txn.epoch."


def txn_mark_app_id(producer_id: str, partition: int) -> str:
    return f"{TXN_MARK_PREFIX}{int(partition)}.{producer_id}"


def txn_epoch_app_id(producer_id: str, partition: int) -> str:
    return f"{TXN_EPOCH_PREFIX}{int(partition)}.{producer_id}"


def open_mark(first: int) -> int:
    """The mark of a transaction open in the partition since offset ``first``."""
    return 2 * first + 1


def closed_mark(marker: int) -> int:
    """The mark once the transaction's marker is at offset ``marker``."""
    return 2 * marker + 2


def open_since(mark: int | None) -> int | None:
    """The first offset of the producer's open transaction in the partition; None when none is open."""
    if mark is None or mark < 0 or mark % 2 == 0:
        return None
    return (mark - 1) // 2


def last_stable_offset(marks: Mapping[str, int], end: int) -> int:
    """Kafka's LSO: the first offset of the earliest transaction still open in the partition, else
    its end (a read_committed reader reads below it only)."""
    firsts = [f for f in (open_since(m) for m in marks.values()) if f is not None]
    return min([end, *firsts])


def marks_by_partition(known: Mapping[str, int]) -> dict[int, dict[str, int]]:
    """Partition -> producer id -> mark of every transactional producer, from a log snapshot's
    application versions (``known``), in one pass; partitions with none are absent."""
    out: dict[int, dict[str, int]] = {}
    for app_id, mark in known.items():
        if app_id.startswith(TXN_MARK_PREFIX):
            partition, _, producer = app_id[len(TXN_MARK_PREFIX):].partition(".")
            out.setdefault(int(partition), {})[producer] = mark
    return out


def closed_without_marker(mark: int | None, end: int) -> int | None:
    """The mark that ends, without a control row, a transaction open in a retired partition whose
    log ends at ``end`` (its rows are purged: nothing is left for a marker to decide); None when
    none is open. Above the open mark (its first offset is below ``end``), as marks must rise."""
    return None if open_since(mark) is None else closed_mark(end - 1)


def append_refusal(partition_epoch: int | None, epoch: int) -> str | None:
    """Why a producer at ``epoch`` may not append to a partition whose latest epoch for its
    producer id is ``partition_epoch`` (None: it may). A marker written at a higher epoch (an
    abort by InitProducerId or a timeout, or the bump that ends every transaction) fences every
    append of the older epoch: a zombie's, or a retry that arrives after its transaction ended."""
    if partition_epoch is not None and epoch < partition_epoch:
        return f"producer epoch {epoch} is fenced: the partition has seen epoch {partition_epoch}"
    return None


def marker_needed(partition_epoch: int | None, ended: int) -> bool:
    """Whether the marker of the transaction at epoch ``ended`` is still to be written to a
    partition whose latest epoch for the producer id is ``partition_epoch``. Markers are written at
    the bumped epoch, past ``ended``, and the next transaction appends at it: a partition past
    ``ended`` holds this marker already, or a later transaction a stale finisher must not close."""
    return partition_epoch is None or partition_epoch <= ended


class Marker(NamedTuple):
    """A control record: the end of ``producer``'s transaction in one partition."""

    offset: int
    producer: str
    commit: bool


class Row(NamedTuple):
    """What a reader needs of a log row: its offset, producer id, and whether it is transactional."""

    offset: int
    producer: str
    transactional: bool


class AbortedSpan(NamedTuple):
    """An aborted transaction of ``producer`` in one partition: its rows are the producer's at
    offsets in (``after``, ``marker``): after the producer's previous marker (-1: none known),
    before the abort marker (Kafka's AbortedTransaction, its first offset as the marker before)."""

    producer: str
    after: int
    marker: int


def aborted_spans(markers: Iterable[Marker]) -> list[AbortedSpan]:
    """Each abort among ``markers`` (one partition's, from some offset on) as the span of offsets
    its transaction's rows lie in: a transactional producer's rows belong to the transaction its
    next marker ends."""
    previous: dict[str, int] = {}
    out = []
    for m in sorted(markers):
        if not m.commit:
            out.append(AbortedSpan(m.producer, previous.get(m.producer, -1), m.offset))
        previous[m.producer] = m.offset
    return out


def aborted_below(markers: Iterable[Marker], rows: Iterable[Row]) -> set[int]:
    """The offsets of rows that aborted transactions wrote: each transactional row whose
    producer's next marker after it is an abort (``aborted_spans``)."""
    spans: dict[str, list[AbortedSpan]] = {}
    for span in aborted_spans(markers):
        spans.setdefault(span.producer, []).append(span)
    return {r.offset for r in rows if r.transactional
            and any(s.after < r.offset < s.marker for s in spans.get(r.producer, ()))}


def committed_view(rows: Iterable[Row], markers: Iterable[Marker], marks: Mapping[str, int], end: int,
                   start: int = 0) -> list[int]:
    """The offsets from ``start`` a read_committed reader delivers: below the last stable offset,
    no aborted transaction's rows, no markers."""
    rows = [r for r in rows if r.offset >= start]
    lso = last_stable_offset(marks, end)
    aborted = aborted_below(markers, rows)
    return [r.offset for r in sorted(rows) if r.offset < lso and r.offset not in aborted]
