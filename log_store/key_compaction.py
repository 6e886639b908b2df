"""Key compaction's commit: each due partition's cleanable range (``log_store.cleaning``) read,
its surviving records written as new files in offset order, the files that lost records removed
and the partition's cleaned offset (``names.cleaned_app_id``) set, in one commit per batch of
partitions recorded as Delta's OPTIMIZE with ``dataChange=false``, as file compaction commits.

``dataChange=false``: the change feed and Delta streaming readers skip the commit, so the change
feed keeps every record as it was appended and a stream reading the table is not told of
deletions (Kafka's consumers already past a compacted record never hear of it either). Readers of
the log read by offsets and see the gaps.

The commit depends only on the files it removes and the cleaned offsets it sets: an append racing
it lands; a racing retention, delete-records or file compaction removing one of the same files,
or another key compaction of the partition, makes it read again and start over. Nothing else
changes between the read and the commit, so a process killed anywhere leaves either the old files
or the new ones, and running it again finds the work still due or done.

Across a resize (``barriers``: the topic's resizes at a version of its history) a key's records
lie in several partitions; a batch reads every partition's keys and epochs at the same version
and applies ``key_order``'s topic-wide rule: a record goes once a record of its key of a later era
is in another partition, and a tombstone stays while one of an earlier era is. A partition holding
records so superseded in its cleanable range is due for that alone. Records of earlier eras are
never appended again (count fencing), so the read can only overstate what must stay: an append
racing the commit changes nothing decided.

That read is the whole topic's, so it is not made at every call: only when a partition is due,
or when a partition's records not yet judged topic-wide are due by the same dirty ratio and
``max.compaction.lag.ms`` (``cleaning.dirty_due``) counted from its *judged* offset
(``names.judged_app_id``) instead of its cleaned one. A look at every partition whose commit
cleans all it found sets each partition's judged offset to its cleanable end then (a look that
finds nothing commits only those): every record below them was in a cleanable range at that look
and judged against every record then, so a supersession left needs a record past a judged offset,
appended or become cleanable since, which makes its partition due by that rule in time. A
partition's own cleaned offset cannot serve: cleaning one partition alone (``--partition``, or a
batch of some) judges its records against the others but not the others' against them. The judged
offsets are counters, free to fall (the cleanable end falls where file compaction merged a young
file into an old one, or ``min.compaction.lag.ms`` grew): each set is one look's, and a commit
depends on none. Per-file epoch stats could not replace them: records of earlier eras stay in
every partition that had keys before a resize, so "earlier eras are left" is true for good.

An arrival log: only files of one partition are cleaned (``cleaning.cleanable_end`` stops at a
shared file; file compaction splits those into one-partition files first), and the rewritten
files carry their range tag as file compaction's do.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel
from pyspark.sql import SparkSession

from log_store import commits, rs_reader
from log_store.cleaning import (
    Cleaner, bare_markers, cleanable_end, dirty_due, due, expiring, range_files, rewrites, survivors, undated,
)
from log_store.crash import crash_point
from log_store.errors import OffsetCheckError
from log_store.files import is_remote
from log_store.key_order import Barrier, elsewhere, eras
from log_store.file_compaction import COMMIT_BYTES, batches_until_done, compaction_batch
from log_store.log_files import (
    CLEANED_TAG, RANGES_TAG, DataFile, encode_cleaned, encode_ranges, meta_layout, partition_files, to_arrow,
)
from log_store import log_metadata
from log_store.log_metadata import ARRIVAL, TOPIC_VERSION_PROP, Mode, TopicLogMetadata, log_end
from log_store.names import cleaned_app_id, judged_app_id, log_start_app_id
from log_store.rs_engine import RsTransaction
from log_store.txn_markers import has_control_column
from log_store.txn_marks import CONTROL_COLUMN, AbortedSpan, last_stable_offset, marks_by_partition
from log_store.txn_reads import LOG_END, MARKER_COLUMNS, aborted_rows, markers_of, spans_of


class KeyCompaction(BaseModel):
    """What one key compaction did to one partition."""

    partition: int
    reason: str  # why it was due (``cleaning.due``)
    records_before: int  # in the cleanable range
    records_after: int
    files_removed: int
    files_added: int
    previous_cleaned: int  # the cleaned offset before (the log start if never cleaned)
    cleaned_up_to: int  # the end of the cleanable range: records below it are compacted
    version: int


Barriers = Callable[[int], list[Barrier]]  # a topic version -> the resizes in force there


def compact_keys(spark: SparkSession, path: str, cleaner: Cleaner, target_bytes: int,
                 partitions: list[int] | None = None, now_ms: int | None = None,
                 barriers: Barriers | None = None) -> list[KeyCompaction]:
    """Compact every due partition of the log at ``path`` (or of ``partitions``) as of ``now_ms``
    (default: now). Partitions share a commit while their ranges add up to
    ``max(target_bytes, COMMIT_BYTES)`` (``file_compaction.compaction_batch``); each at most once a call.
    ``barriers``: the topic's resizes at the topic version the log's metadata was set from (read
    after the log's snapshot, so they reach it); None for a log never resized."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return batches_until_done(lambda done: _compact_batch(spark, path, cleaner, target_bytes, partitions, done, now,
                                                          barriers))


def cleaned_offsets(spark: SparkSession, path: str) -> tuple[int, dict[int, int]]:
    """The log's version and each partition's cleaned offset there (partitions never cleaned absent)."""
    txn = commits.start(spark, path, "the log table")
    try:
        known = txn.snapshot_app_versions()
        meta = TopicLogMetadata.from_properties(txn.configuration())
        return txn.read_version, log_metadata.cleaned_offsets(known, meta.partitions)
    finally:
        txn.release()


class _Due(BaseModel):
    files: list[DataFile]
    start: int
    end: int
    cleaned: int
    reason: str
    unjudged: str  # why its records from its judged offset on call for a topic-wide look ("" if not)


def _ranges(files: dict[int, list[DataFile]], meta: TopicLogMetadata, known: dict[str, int],
            cleaner: Cleaner, now: int) -> dict[int, _Due]:
    """Each readable partition's cleanable range, ``reason`` empty where cleaning is not due. It
    ends below the last stable offset, as Kafka's cleaner stops at the first unstable one: an open
    transaction's record supersedes nothing until its transaction commits."""
    out: dict[int, _Due] = {}
    marks = marks_by_partition(known)
    for p, pm in sorted(meta.partitions.items()):
        if pm.mode is Mode.NONE:
            continue
        start = max(pm.start_offset, known.get(log_start_app_id(p), 0))
        cleaned = max(start, known.get(cleaned_app_id(p), start))
        judged = max(start, known.get(judged_app_id(p), start))
        fs = files.get(p, [])
        stable = last_stable_offset(marks.get(p, {}), log_end(known, p, pm.start_offset))
        end = cleanable_end(fs, start, stable, now, cleaner.min_lag_ms)
        found = range_files(fs, start, end)
        out[p] = _Due(files=found, start=start, end=end, cleaned=cleaned, reason=due(found, cleaned, now, cleaner) or "",
                      unjudged=dirty_due(found, judged, now, cleaner) or "")
    return out


def _looks(ranges: dict[int, _Due]) -> bool:
    """Whether the topic's keys are read (``_topic``: nothing if it was never resized): a partition
    is due, or its records not yet judged topic-wide are."""
    return any(d.reason or d.unjudged for d in ranges.values())


def _judged(ranges: dict[int, _Due], found: set[int], chosen: set[int], whole: bool) -> dict[str, int]:
    """The judged offsets a commit after a topic-wide look sets: each partition's cleanable end,
    where the look was at every partition (``whole``) and the commit cleans all it found; else none."""
    if not whole or found - chosen:
        return {}
    return {judged_app_id(p): d.end for p, d in ranges.items()}


class _Topic(BaseModel):
    """The topic's records (``partition``, ``offset``, ``key``, ``era``, and ``settled`` where
    transactions wrote: ``key_order.elsewhere``) and its resizes."""

    model_config = {"arbitrary_types_allowed": True}
    rows: pa.Table
    barriers: list[Barrier]


def _topic(spark: SparkSession, path: str, txn, meta: TopicLogMetadata, known: dict[str, int],
           barriers: Barriers | None) -> _Topic | None:
    """Every readable record's key and era at the transaction's version; None if never resized."""
    found = barriers(int(txn.configuration().get(TOPIC_VERSION_PROP, "1"))) if barriers else []
    if not found:
        return None
    ranges = {p: (max(pm.start_offset, known.get(log_start_app_id(p), 0)), log_end(known, p, pm.start_offset))
              for p, pm in meta.partitions.items() if pm.mode is not Mode.NONE}
    marks = marks_by_partition(known) if has_control_column(txn) else {}
    rows = _read(spark, txn, path, {p: r for p, r in ranges.items() if r[0] < r[1]},
                 ["partition", "offset", "key", "leader_epoch"] + (["producer_id", CONTROL_COLUMN] if marks else []))
    era = eras(rows.column("partition").combine_chunks(), rows.column("leader_epoch").combine_chunks(), found)
    out = rows.select(["partition", "offset", "key"]).append_column("era", era)
    if marks:
        out = out.append_column("settled", _settled(rows, marks, {p: e for p, (_s, e) in ranges.items()}))
    return _Topic(rows=out, barriers=found)


def _settled(rows: pa.Table, marks: dict[int, dict[str, int]], ends: dict[int, int]) -> pa.Array:
    """Which of the topic's ``rows`` (from each partition's log start to its end, markers among
    them) may supersede a record elsewhere: none of an aborted transaction (``txn_reads``'s rule),
    none at or past its partition's last stable offset (as a partition is cleaned below it only)."""
    import numpy as np

    parts = rows.column("partition").combine_chunks().to_numpy(zero_copy_only=False)
    offsets = rows.column("offset").combine_chunks().to_numpy(zero_copy_only=False)
    out = np.ones(rows.num_rows, dtype=bool)
    spans = spans_of(markers_of(rows.filter(pc.is_valid(rows.column(CONTROL_COLUMN)))))
    for p, pm in marks.items():
        mine = np.flatnonzero(parts == p)
        out[mine[offsets[mine] >= last_stable_offset(pm, ends.get(p, 0))]] = False
        if spans.get(p):
            out[mine[aborted_rows(rows.take(mine), spans[p]).to_numpy(zero_copy_only=False)]] = False
    return pa.array(out, pa.bool_())


def _superseded_elsewhere(topic: _Topic, ranges: dict[int, _Due]) -> dict[int, _Due]:
    """The partitions not due otherwise that hold, in their cleanable range, a record whose key has
    a record of a later era in another partition."""
    out: dict[int, _Due] = {}
    for p, d in ranges.items():
        if d.reason or d.end <= d.start:
            continue
        o = topic.rows.column("offset")
        mine = topic.rows.filter(pc.and_(pc.equal(topic.rows.column("partition"), p),
                                         pc.and_(pc.greater_equal(o, d.start), pc.less(o, d.end))))
        if mine.num_rows and pc.any(elsewhere(mine, p, topic.rows)[0]).as_py():
            out[p] = d.model_copy(update={"reason": "superseded in another partition"})
    return out


def _compact_batch(spark: SparkSession, path: str, cleaner: Cleaner, target_bytes: int,
                   partitions: list[int] | None, done: set[int], now: int,
                   barriers: Barriers | None = None) -> list[KeyCompaction]:
    txn = commits.start(spark, path, "the log table")
    meta = TopicLogMetadata.from_properties(txn.configuration())
    known = txn.snapshot_app_versions()
    ranges = {p: d for p, d in _ranges(partition_files(txn), meta, known, cleaner, now).items()
              if p not in done and (partitions is None or p in partitions)}
    try:
        topic = _topic(spark, path, txn, meta, known, barriers) if _looks(ranges) else None
    except Exception:
        txn.release()
        raise
    found = {p: d for p, d in ranges.items() if d.reason}
    if topic is not None:
        found.update(_superseded_elsewhere(topic, ranges))
    chosen = compaction_batch({p: [d.files] for p, d in found.items()}, max(target_bytes, COMMIT_BYTES))
    judged = {} if topic is None else _judged(ranges, set(found), set(chosen), partitions is None and not done)
    judged = {a: o for a, o in judged.items() if known.get(a) != o}
    if not chosen and not judged:
        txn.release()
        return []
    ranges = {p: (found[p].files[0].first, found[p].end) for p in chosen if found[p].files}
    rows = _read(spark, txn, path, ranges) if ranges else None
    aborted = _aborted(spark, txn, path, ranges, known)
    arrival = meta_layout(txn) == ARRIVAL
    results, removed = [], []
    for p in chosen:
        d = found[p]
        txn.app_version(cleaned_app_id(p))  # another key compaction of the partition conflicts
        mine = rows.filter(pc.equal(rows.column("partition"), p)) if p in ranges else None
        before = sum(f.records for f in d.files)
        if mine is not None and mine.num_rows != before:
            raise OffsetCheckError(f"key compaction of partition {p} read {mine.num_rows} records from files holding "
                                   f"{before}; nothing was committed. This is a bug in lakelog")
        kept_rows, gone, added = _rewrite(txn, p, d.files, mine, now, cleaner, target_bytes, arrival, topic,
                                          aborted.get(p, []))
        removed.extend(gone)
        results.append(dict(partition=p, reason=d.reason, records_before=before,
                            records_after=before - sum(f.records for f in gone) + kept_rows,
                            files_removed=len(gone), files_added=added, previous_cleaned=d.cleaned,
                            cleaned_up_to=max(d.end, d.cleaned)))
    txn.remove((f.action() for f in removed), data_change=False)
    crash_point("compaction:before_commit")
    version = txn.commit_as("OPTIMIZE", {cleaned_app_id(r["partition"]): r["cleaned_up_to"] for r in results},
                            counters=judged)
    return [KeyCompaction(**r, version=version) for r in results]


def _read(spark: SparkSession, txn, path: str, ranges: dict[int, tuple[int, int]],
          columns: list[str] | None = None) -> pa.Table:
    """The records of ``ranges`` as of ``txn``'s version (``columns``, default all): with delta-rs
    on a local root and where delta-rs commits (S3; no Spark job, as file compaction reads),
    through Spark elsewhere."""
    version = txn.read_version
    if not is_remote(path) or isinstance(txn, RsTransaction):
        return rs_reader.log_ranges(path, version, ranges, columns,
                                    storage=txn.storage if isinstance(txn, RsTransaction) else None)
    where = " OR ".join(f"(partition = {p} AND offset >= {a} AND offset < {b})" for p, (a, b) in ranges.items())
    log = spark.read.format("delta").option("versionAsOf", version).load(path)
    log = log.select(*columns) if columns else log
    return to_arrow(log.where(where or "false")).sort_by([("partition", "ascending"), ("offset", "ascending")])


def _aborted(spark: SparkSession, txn, path: str, ranges: dict[int, tuple[int, int]],
             known: dict[str, int]) -> dict[int, list[AbortedSpan]]:
    """The aborted transactions of the partitions in ``ranges`` that transactions wrote to, from
    their abort markers from each range's start to the log end (``txn_reads``)."""
    marks = marks_by_partition(known)
    wanted = {p: (a, LOG_END) for p, (a, _b) in ranges.items() if p in marks}
    if not wanted or not has_control_column(txn):
        return {}
    found = _read(spark, txn, path, wanted, MARKER_COLUMNS)
    return spans_of(markers_of(found.filter(pc.is_valid(found.column(CONTROL_COLUMN)))))


def _rewrite(txn, partition: int, files: list[DataFile], rows: pa.Table | None, now: int, cleaner: Cleaner,
             target_bytes: int, arrival: bool, topic: _Topic | None,
             aborted: list[AbortedSpan] = ()) -> tuple[int, list[DataFile], int]:
    """Write the survivors of the files ``cleaning.rewrites`` picks; return the records kept in
    them, the files they replace and how many files were written."""
    if rows is None or rows.num_rows == 0:
        return 0, [], 0
    later = earlier = None
    if topic is not None:
        era = eras(rows.column("partition").combine_chunks(), rows.column("leader_epoch").combine_chunks(),
                   topic.barriers)
        later, earlier = elsewhere(pa.table({"key": rows.column("key"), "era": era}), partition, topic.rows)
    bare = bare_markers(rows, pa.array([True] * rows.num_rows, pa.bool_()))
    before = pc.and_(bare, pc.invert(undated(rows, files, expiring(rows, bare))))  # bare, and dated so
    keep = survivors(rows, files, now, cleaner.delete_retention_ms, later, earlier,
                     aborted_rows(rows, list(aborted)) if aborted else None, bare=before)
    bare = pc.and_(bare_markers(rows, keep), keep)
    offsets = rows.column("offset").to_numpy()
    mask = keep.to_numpy(zero_copy_only=False)
    dying = expiring(rows, bare).to_numpy(zero_copy_only=False)
    newly = pc.and_(bare, pc.invert(before)).to_numpy(zero_copy_only=False)
    inside = [(offsets >= f.first) & (offsets <= f.last) for f in files]
    kept = [int(mask[i].sum()) for i in inside]
    dead = [int((mask & dying)[i].sum()) for i in inside]
    plan = rewrites(files, kept, dead, now, target_bytes, [_fresh(offsets, mask, newly, i) for i in inside])
    kept_rows, added, gone = 0, 0, []
    for r in plan:
        chosen = pc.and_(keep, pc.and_(pc.greater_equal(rows.column("offset"), r.first),
                                       pc.less_equal(rows.column("offset"), r.last)))
        part = rows.filter(chosen)
        gone.extend(f for f in r.files if not gone or gone[-1] is not f)  # a file split in two: once
        if not part.num_rows:
            continue
        count = int(dying[chosen.to_numpy(zero_copy_only=False)].sum())
        tags = {CLEANED_TAG: encode_cleaned(r.cleaned_at_ms, count)}
        if arrival:
            first, last = part.column("offset")[0].as_py(), part.column("offset")[-1].as_py()
            tags[RANGES_TAG] = encode_ranges({partition: (first, last, part.num_rows)})
        added += len(txn.write_rows(part, partition_by=None if arrival else "partition", tags=tags, data_change=False))
        kept_rows += part.num_rows
    return kept_rows, gone, added


def _fresh(offsets, kept, newly, inside) -> tuple[int, int] | None:
    """For one file (``inside``: its rows), the offset of its first marker this cleaning left bare
    and the records it keeps from there on (``cleaning.rewrites``'s ``fresh``); None if none."""
    found = offsets[inside & newly]
    if not len(found):
        return None
    at = int(found.min())
    return at, int((kept & inside & (offsets >= at)).sum())
