"""Kafka's key compaction (``cleanup.policy=compact``) as pure rules: which files of a partition
can be cleaned, when cleaning is due, which records survive and which files are rewritten.
The commit that applies them is ``log_store.key_compaction``.

Files are lakelog's segments. A partition's *cleanable range* runs from its log start to the end
of its last file whose records are all older than ``min.compaction.lag.ms``, never splitting a
file, stopping at the first file that is too young, holds several partitions (the arrival
layout's unsorted files, which file compaction splits first) or has no timestamps. Below the
partition's *cleaned* offset (``names.cleaned_app_id``) the range was compacted before; from it
on the range is *dirty*.

Within the range a record survives iff no later record of its key is in the range: each key's
latest record, at its own offset (offsets stay, with gaps). A record with a null key has nothing
to be superseded by and is kept; so is a transaction's marker (a control row, whose key is null),
and it is no tombstone: only a keyed record's null value is. The range ends below the partition's
last stable offset (``key_compaction``): an open transaction's record supersedes nothing; an
aborted transaction's records go, and supersede nothing either. A tombstone (a null value) survives while it is its key's
latest, until ``delete.retention.ms`` after the cleaning that first passed it (KIP-534's delete
horizon), kept per file in its ``lakelog.cleaned`` tag. A marker expires as a tombstone does once
no record of its transaction is left (``bare_markers``; Kafka's cleaner too): dated by the cleaning
after which none was left, so a reader that read the records before has ``delete.retention.ms``
to reach it.

Across a resize a key's records lie in several partitions, which the resize gates order
(``log_store.key_order``): a record is also superseded by a record of its key of a later era in
another partition, and a tombstone stays past its horizon while a record of its key of an earlier
era survives in another partition.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from log_store.log_files import DataFile
from log_store.txn_marks import CONTROL_COLUMN


@dataclass(frozen=True)
class Cleaner:
    """A topic's compaction configs (Kafka's names in ``control_plane.topic_config``)."""

    min_lag_ms: int = 0
    max_lag_ms: int = 2**63 - 1
    delete_retention_ms: int = 86_400_000
    min_dirty_ratio: float = 0.5


def cleanable_end(files: list[DataFile], log_start: int, log_end: int, now_ms: int, min_lag_ms: int) -> int:
    """The end (exclusive) of the cleanable range of a partition's ``files`` (by first offset):
    past each file from the log start on while its newest record is at least ``min_lag_ms`` old
    at ``now_ms``, it holds one partition and lies below the log end; ``log_start`` if none."""
    end = log_start
    for f in files:
        if f.last < log_start:
            continue
        if (f.shared or f.last >= log_end or f.max_timestamp_ms is None
                or f.max_timestamp_ms > now_ms - min_lag_ms):
            break
        end = f.last + 1
    return end


def range_files(files: list[DataFile], log_start: int, end: int) -> list[DataFile]:
    """The files of the cleanable range [``log_start``, ``end``) (whole files, by first offset)."""
    return [f for f in files if f.last >= log_start and f.last < end]


def dirty(files: list[DataFile], cleaned: int) -> list[DataFile]:
    """The files of a range holding records at or past ``cleaned`` (never compacted)."""
    return [f for f in files if f.last >= cleaned]


def dirty_ratio(files: list[DataFile], cleaned: int) -> float:
    """Kafka's dirty ratio: the dirty files' bytes over the range's bytes (0 for an empty range)."""
    total = sum(f.size for f in files)
    return sum(f.size for f in dirty(files, cleaned)) / total if total else 0.0


def expired_tombstones(f: DataFile, now_ms: int, delete_retention_ms: int) -> bool:
    """Whether ``f`` holds tombstones past their delete horizon (cleaned ``delete_retention_ms`` ago)."""
    return bool(f.tombstones) and f.cleaned_at_ms is not None and f.cleaned_at_ms + delete_retention_ms <= now_ms


def due(files: list[DataFile], cleaned: int, now_ms: int, cleaner: Cleaner) -> str | None:
    """Why a partition's cleanable range (``files``) is to be cleaned now, or None: its dirty ratio
    reached ``min.cleanable.dirty.ratio``; a dirty record is older than ``max.compaction.lag.ms``;
    or a file holds tombstones past their delete horizon (Kafka's three triggers)."""
    if reason := dirty_due(files, cleaned, now_ms, cleaner):
        return reason
    if any(expired_tombstones(f, now_ms, cleaner.delete_retention_ms) for f in files):
        return "tombstones past delete.retention.ms"
    return None


def dirty_due(files: list[DataFile], since: int, now_ms: int, cleaner: Cleaner) -> str | None:
    """The triggers of ``due`` that count records from ``since`` on as dirty: the dirty ratio, or
    a dirty record older than ``max.compaction.lag.ms``."""
    found = dirty(files, since)
    if found and dirty_ratio(files, since) >= cleaner.min_dirty_ratio:
        return "dirty ratio"
    oldest = [f.max_timestamp_ms if f.min_timestamp_ms is None else f.min_timestamp_ms for f in found]
    if any(t is not None and t <= now_ms - cleaner.max_lag_ms for t in oldest):
        return "max compaction lag"
    return None


def keyed_tombstones(rows: pa.Table) -> pa.Array:
    """Which ``rows`` are tombstones that expire: a null value under a key. A null-keyed row (a
    transaction's marker among them) is kept whatever its value: a marker expires only once bare
    (``bare_markers``)."""
    return pc.and_(pc.is_null(rows.column("value")), pc.is_valid(rows.column("key")))


def expiring(rows: pa.Table, bare: pa.Array | None) -> pa.Array:
    """Which ``rows`` a file's delete horizon applies to, as its tag counts them: keyed tombstones
    and ``bare`` markers (``bare_markers``; None: none)."""
    found = keyed_tombstones(rows)
    return found if bare is None else pc.or_(found, bare)


def bare_markers(rows: pa.Table, keep: pa.Array) -> pa.Array:
    """Which of one partition's ``rows`` (``offset``, ``producer_id``, ``control``: every row from
    the log start, by offset) are markers whose transaction has no record among the ``keep`` rows:
    none of its producer's records lies between the producer's marker before it (kept or not: a
    marker goes only once bare, so the records before it are its own transaction's) and it.
    Kafka's cleaner keeps a marker while a record of its transaction is left, then lets it go as a
    tombstone goes."""
    import numpy as np

    n = rows.num_rows
    out = np.zeros(n, dtype=bool)
    if CONTROL_COLUMN not in rows.column_names or n == 0:
        return pa.array(out, pa.bool_())
    marker = pc.is_valid(rows.column(CONTROL_COLUMN).combine_chunks()).to_numpy(zero_copy_only=False)
    if not marker.any():
        return pa.array(out, pa.bool_())
    codes = pc.dictionary_encode(rows.column("producer_id").combine_chunks()).indices
    codes = pc.fill_null(codes, -1).to_numpy(zero_copy_only=False)
    offsets = rows.column("offset").combine_chunks().to_numpy(zero_copy_only=False)
    kept = np.asarray(keep.to_numpy(zero_copy_only=False), dtype=bool) & ~marker
    for code in np.unique(codes[marker]):
        if code < 0:
            continue
        mine = np.flatnonzero(marker & (codes == code))
        ends = offsets[mine]
        order = np.argsort(ends)
        mine, ends = mine[order], ends[order]
        starts = np.concatenate(([-1], ends[:-1]))
        records = np.sort(offsets[kept & (codes == code)])
        left = np.searchsorted(records, ends, "left") - np.searchsorted(records, starts, "right")
        out[mine] = left == 0
    return pa.array(out, pa.bool_())


def file_index(offsets: pa.Array, files: list[DataFile]) -> pa.Array:
    """The index in ``files`` (by first offset, disjoint) of the file holding each offset."""
    import numpy as np

    firsts = np.array([f.first for f in files], dtype=np.int64)
    return pa.array(np.searchsorted(firsts, offsets.to_numpy(zero_copy_only=False), side="right") - 1)


def undated(rows: pa.Table, files: list[DataFile], dying: pa.Array) -> pa.Array:
    """Which of a range's ``rows`` lie in a dated file (``files``) that holds more expiring rows
    (``dying``, per row: ``expiring``) than its tag counts: a file's rows never change, so a marker
    there was left bare after the file was dated (its records removed below the log start, or by
    a cleaning of an earlier release) and has no date of its own yet."""
    import numpy as np

    at = file_index(rows.column("offset").combine_chunks(), files).to_numpy(zero_copy_only=False)
    counts = np.bincount(at[np.asarray(dying.to_numpy(zero_copy_only=False), dtype=bool)], minlength=len(files))
    stale = np.array([f.cleaned_at_ms is not None and counts[i] > (f.tombstones or 0) for i, f in enumerate(files)],
                     dtype=bool)
    return pa.array(stale[at] if len(files) else np.zeros(rows.num_rows, dtype=bool), pa.bool_())


def survivors(rows: pa.Table, files: list[DataFile], now_ms: int, delete_retention_ms: int,
              later: pa.Array | None = None, earlier: pa.Array | None = None,
              aborted: pa.Array | None = None, bare: pa.Array | None = None) -> pa.Array:
    """Which of one partition's ``rows`` (``offset``, ``key``, ``value``: every record of the range
    ``files``) survive: each key's latest record, every record with a null key, and no tombstone
    past its file's delete horizon. A boolean per row.

    Across partitions (``key_order.elsewhere``, per row): a row whose key has a record of a later
    era in another partition (``later``) is superseded by it; a tombstone whose key still has a
    record of an earlier era in another partition (``earlier``) stays past its horizon, or a
    reader would get that record as the key's latest.

    ``aborted`` (per row): the records of aborted transactions, which go and supersede nothing, as
    Kafka's cleaner discards them (a read_committed reader would otherwise lose the key's latest
    committed record to one it never delivers).

    ``bare`` (per row): markers whose transaction had no record left before this cleaning
    (``bare_markers`` of every row), which go past their file's delete horizon as tombstones do."""
    offsets, keys = rows.column("offset").combine_chunks(), rows.column("key").combine_chunks()
    if rows.num_rows == 0:
        return pa.array([], pa.bool_())
    live = pa.table({"key": keys, "offset": offsets})
    live = live if aborted is None else live.filter(pc.invert(aborted))
    latest = live.group_by("key").aggregate([("offset", "max")])
    kept = pc.or_(pc.is_null(keys), pc.is_in(offsets, value_set=latest.column("offset_max")))
    if aborted is not None:
        kept = pc.and_(kept, pc.invert(aborted))
    if later is not None:
        kept = pc.and_(kept, pc.invert(later))
    horizon_passed = pa.array([expired_tombstones(f, now_ms, delete_retention_ms) for f in files], pa.bool_())
    passed = pc.take(horizon_passed, file_index(offsets, files))
    expired = pc.and_(pc.and_(pc.is_null(rows.column("value").combine_chunks()), passed), pc.is_valid(keys))
    if earlier is not None:
        expired = pc.and_(expired, pc.invert(earlier))
    if bare is not None:
        expired = pc.or_(expired, pc.and_(bare, passed))
    return pc.and_(kept, pc.invert(expired))


@dataclass(frozen=True)
class Rewrite:
    """Files of a range rewritten as one file of their surviving records in [``first``, ``last``],
    cleaned at ``cleaned_at_ms`` (a file dated afresh from an offset on is in two rewrites)."""

    files: tuple[DataFile, ...]
    cleaned_at_ms: int
    first: int = -1
    last: int = -1


def rewrites(files: list[DataFile], kept: list[int], tombstones: list[int], now_ms: int,
             target_bytes: int, fresh: list[tuple[int, int] | None] | None = None) -> list[Rewrite]:
    """The files of a range (by first offset) to rewrite, given each one's surviving records
    (``kept``) and the expiring ones among them (``tombstones``, ``expiring``): a file losing
    records, and a file never cleaned that keeps expiring rows (to date their delete horizon).
    ``fresh`` (per file): where a file already dated holds a marker this cleaning left bare, the
    offset of the first such and the records kept from it on: the file is rewritten in two, its
    rows from there dated now (their horizon restarts, so a tombstone there waits longer, never
    less), those before keeping their date. Neighbouring rewritten pieces cleaned at the same time
    become one file, up to ``target_bytes`` of survivors; a file keeping everything and no undated
    expiring row stays as it is. A rewrite of files keeping nothing writes no file."""
    pieces: list[tuple[DataFile, int, int, int, int, bool]] = []  # file, first, last, kept, date, rewritten
    for i, (f, n, dead) in enumerate(zip(files, kept, tombstones)):
        cut = fresh[i] if fresh else None
        if cut is None or f.cleaned_at_ms is None:
            when = now_ms if f.cleaned_at_ms is None else f.cleaned_at_ms
            pieces.append((f, f.first, f.last, n, when, n < f.records or bool(dead and f.cleaned_at_ms is None)))
            continue
        at, after = cut
        if at > f.first:
            pieces.append((f, f.first, at - 1, n - after, f.cleaned_at_ms, True))
        pieces.append((f, at, f.last, after, now_ms, True))
    out: list[Rewrite] = []
    group: list[tuple[DataFile, int, int]] = []
    at, size = None, 0

    def close() -> None:
        if group:
            files_in: list[DataFile] = []
            for f, _a, _b in group:
                if not files_in or files_in[-1] is not f:
                    files_in.append(f)
            out.append(Rewrite(files=tuple(files_in), cleaned_at_ms=at, first=group[0][1], last=group[-1][2]))

    for f, first, last, n, when, rewritten in pieces:
        if not rewritten:
            close()
            group, at, size = [], None, 0
            continue
        left = f.size * n // max(f.records, 1)
        if group and (when != at or size + left > target_bytes):
            close()
            group, size = [], 0
        group.append((f, first, last))
        at, size = when, size + left
    close()
    return out
