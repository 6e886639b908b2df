"""The rules of transactions, without Spark or Delta: what a partition's marks mean, its last
stable offset, who may append, which transaction states may follow which, and what a reader at
each isolation level delivers. The model (``control_plane.transactions.model``) and the code call
these same functions.

A partition keeps, for each transactional producer id, one application version of its log table
(``mark``): ``2 * first + 1`` while a transaction of the producer is open in the partition, its
first record at offset ``first``; ``2 * marker + 2`` once the transaction's marker is at offset
``marker``. Offsets only grow, so the mark only rises, as Delta's application versions must; and
the partition's last stable offset needs no scan of its rows.
"""

from __future__ import annotations

from enum import Enum
from typing import Iterable, Mapping, NamedTuple


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


def last_stable_offset(marks: Mapping[int, int], end: int) -> int:
    """Kafka's LSO: the first offset of the earliest transaction still open in the partition, else
    its end (a read_committed reader reads below it only)."""
    firsts = [f for f in (open_since(m) for m in marks.values()) if f is not None]
    return min([end, *firsts])


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


class TxnState(str, Enum):
    """A transactional id's states, as Kafka's coordinator names them."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"

    @property
    def deciding(self) -> bool:
        """A decision is recorded and its markers may still be missing: anyone may finish it."""
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def settled(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


NEXT: dict[TxnState, tuple[TxnState, ...]] = {
    TxnState.EMPTY: (TxnState.ONGOING, TxnState.EMPTY),
    TxnState.ONGOING: (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT),
    TxnState.PREPARE_COMMIT: (TxnState.COMPLETE_COMMIT,),
    TxnState.PREPARE_ABORT: (TxnState.COMPLETE_ABORT,),
    TxnState.COMPLETE_COMMIT: (TxnState.ONGOING, TxnState.EMPTY),
    TxnState.COMPLETE_ABORT: (TxnState.ONGOING, TxnState.EMPTY),
}


def transition_refusal(current: TxnState, wanted: TxnState, epoch: int, current_epoch: int) -> str | None:
    """Why a commit taking a transactional id from ``current`` to ``wanted`` by a producer at
    ``epoch`` is refused (None: it may). A decision is final: once Prepare* is recorded only its
    Complete* follows."""
    if epoch != current_epoch:
        return f"producer epoch {epoch} is fenced: the transactional id is at epoch {current_epoch}"
    if wanted not in NEXT[current]:
        return f"a transaction in state {current.value} cannot go to {wanted.value}"
    return None


class Marker(NamedTuple):
    """A control record: the end of ``producer``'s transaction in one partition."""

    offset: int
    producer: int
    commit: bool


class Row(NamedTuple):
    """What a reader needs of a log row: its offset, producer id, and whether it is transactional."""

    offset: int
    producer: int
    transactional: bool


def aborted_below(markers: Iterable[Marker], rows: Iterable[Row]) -> set[int]:
    """The offsets of rows that aborted transactions wrote: each transactional row whose
    producer's next marker after it is an abort."""
    ends: dict[int, list[Marker]] = {}
    for m in sorted(markers):
        ends.setdefault(m.producer, []).append(m)
    out = set()
    for r in rows:
        if not r.transactional:
            continue
        after = next((m for m in ends.get(r.producer, []) if m.offset > r.offset), None)
        if after is not None and not after.commit:
            out.add(r.offset)
    return out


def committed_view(rows: Iterable[Row], markers: Iterable[Marker], marks: Mapping[int, int], end: int,
                   start: int = 0) -> list[int]:
    """The offsets from ``start`` a read_committed reader delivers: below the last stable offset,
    no aborted transaction's rows, no markers."""
    rows = [r for r in rows if r.offset >= start]
    lso = last_stable_offset(marks, end)
    aborted = aborted_below(markers, rows)
    return [r.offset for r in sorted(rows) if r.offset < lso and r.offset not in aborted]
