"""Merging a partition's small files (compaction of files, Kafka's segments rolled together).

Runs of consecutive small files of a partition become one file sorted by offset, several
partitions' runs in one commit that changes no data (``dataChange=false``: the change feed and
streaming readers skip it). Delta's OPTIMIZE bin-packs a partition's files by size, mixing old and
new offsets in one file; runs of consecutive offsets keep files that retention can delete whole
and that reads skip by offset. The commit depends on nothing an append writes: an append racing it
lands, and a racing removal of the same files (retention, another compaction) makes it retry. The
planning is pure (``compaction_runs``, ``whole_files``, ``compaction_batch``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from pydantic import BaseModel
from pyspark.sql import SparkSession

from log_store import commits, rs_reader
from log_store.crash import crash_point
from log_store.delta_errors import retry_on_conflict
from log_store.errors import OffsetCheckError
from log_store.files import is_remote
from log_store.log_files import DataFile, meta_layout, partition_files, to_arrow, write_segments
from log_store.log_metadata import ARRIVAL, Mode, TopicLogMetadata, log_end
from log_store.rs_engine import RsTransaction


def compaction_runs(files: list[DataFile], target_bytes: int, below: int | None = None) -> list[list[DataFile]]:
    """Runs of consecutive small files (``files`` by first offset; each contiguous, each run's
    offsets consecutive) whose sizes add up to at most ``target_bytes``: each run of two or more
    becomes one file. A file key compaction wrote stays as it is (its tag dates its tombstones). ``below``: only files wholly below this offset (the log end read in the same
    transaction)."""
    runs: list[list[DataFile]] = []
    run: list[DataFile] = []
    size = 0

    def close() -> None:
        if len(run) > 1:
            runs.append(list(run))
        run.clear()

    for f in files:
        small = (f.size < target_bytes and f.contiguous and f.cleaned_at_ms is None
                 and (below is None or f.last < below))
        follows = bool(run) and f.first == run[-1].last + 1
        if small and run and follows and size + f.size <= target_bytes:
            run.append(f)
            size += f.size
            continue
        close()
        if small:
            run.append(f)
            size = f.size
    close()
    return runs


def whole_files(runs: dict[int, list[list[DataFile]]], files: dict[int, list[DataFile]]) -> dict[int, list[list[DataFile]]]:
    """``runs`` with every partition's part of each shared file they take: a shared file is
    rewritten whole or not at all, so another partition's part of it becomes a run of its own
    (alone, or with that partition's runs it already has) in the same commit."""
    wanted = {f.path for found in runs.values() for run in found for f in run if f.shared}
    if not wanted:
        return runs
    out = {p: [list(run) for run in found] for p, found in runs.items()}
    for p, fs in files.items():
        taken = {f.path for run in out.get(p, []) for f in run}
        for f in fs:
            if f.path in wanted and f.path not in taken:
                out.setdefault(p, []).append([f])
        if p in out:
            out[p].sort(key=lambda run: run[0].first)
    return out


def compaction_batch(candidates: dict[int, list[list[DataFile]]], target_bytes: int) -> list[int]:
    """The partitions one compaction commit takes (``candidates``: each partition's runs): in
    partition order while their runs add up to at most ``target_bytes``, and always the first."""
    chosen: list[int] = []
    size = 0
    for p in sorted(candidates):
        more = sum(f.size for run in candidates[p] for f in run)
        if chosen and size + more > target_bytes:
            break
        chosen.append(p)
        size += more
    return chosen


class _PartitionDone(Protocol):
    partition: int


_Done = TypeVar("_Done", bound=_PartitionDone)


class Compaction(BaseModel):
    partition: int
    files_before: int
    files_after: int
    records: int
    version: int | None = None


def compact_partitions(spark: SparkSession, path: str, target_bytes: int, partitions: list[int] | None = None,
                       min_files: int = 2) -> list[Compaction]:
    """Merge the runs of small files (``compaction_runs``) of every partition (or ``partitions``)
    with at least ``min_files`` files in runs, in commits that change no data.

    Partitions share a commit while their runs add up to ``max(target_bytes, COMMIT_BYTES)``
    (``compaction_batch``), so a topic of many small partitions is compacted in one commit rather
    than one per partition. Each partition is compacted at most once per call. The files are
    listed once per call and the listing kept while no one else commits: each listing reads the
    whole snapshot, which grows with the files the last week removed (the soak's tick)."""
    listing: list[_Listing] = []  # the snapshot's files as of a version; emptied when stale
    return batches_until_done(lambda done: _compact_batch(spark, path, target_bytes, partitions, min_files, done,
                                                          listing))


def batches_until_done(batch: Callable[[set[int]], list[_Done]]) -> list[_Done]:
    """Commit ``batch`` (retried on a conflict) until it has nothing left to do; it is given the
    partitions done so far, so each is done at most once a call. Returns what every commit did."""
    out: list[_Done] = []
    while True:
        done = {c.partition for c in out}
        step = retry_on_conflict(lambda: batch(done))
        if not step:
            return out
        out.extend(step)


COMMIT_BYTES = 64 * 1024 * 1024  # what one compaction commit may merge when segment.bytes is smaller


class _Listing(BaseModel):
    version: int
    files: dict[int, list[DataFile]]


def _compact_batch(spark: SparkSession, path: str, target_bytes: int, partitions: list[int] | None,
                   min_files: int, done: set[int], listing: list[_Listing]) -> list[Compaction]:
    """One commit of ``compact_partitions``: one Spark write per round, round k writing the k-th
    run of each partition sorted by (partition, offset) in one task, so Delta's writer makes one
    file per partition. ``listing`` holds the files of the last commit this call made; they are
    this transaction's too if no other commit came since (its own commits only changed ``done``
    partitions), else they are listed again."""
    txn = commits.start(spark, path, "the log table")
    if listing and listing[0].version == txn.read_version:
        files = listing[0].files
    else:
        listing.clear()
        if txn.file_count() < min_files:  # no partition can have enough: skip listing the files
            return []
        files = partition_files(txn)
    meta = TopicLogMetadata.from_properties(txn.configuration())
    known = txn.snapshot_app_versions()
    candidates: dict[int, list[list[DataFile]]] = {}
    for p, fs in sorted(files.items()):
        pm = meta.partitions.get(p)
        if p in done or (partitions is not None and p not in partitions) or pm is None or pm.mode is Mode.NONE:
            continue
        found = compaction_runs(fs, target_bytes, below=log_end(known, p, pm.start_offset))
        if sum(len(run) for run in found) >= min_files:
            candidates[p] = found
    runs = {p: candidates[p] for p in compaction_batch(candidates, max(target_bytes, COMMIT_BYTES))}
    if not runs:
        return []
    arrival = meta_layout(txn) == ARRIVAL
    if arrival:
        runs = whole_files(runs, files)
    # read with delta-rs, written with pyarrow: no Spark job (a local log; one on S3 delta-rs commits to)
    in_driver = not is_remote(path) or isinstance(txn, RsTransaction)
    storage = txn.storage if isinstance(txn, RsTransaction) else None
    log = None if in_driver else spark.read.format("delta").option("versionAsOf", txn.read_version).load(path)
    merged = {p: 0 for p in runs}
    removed: dict[str, DataFile] = {}
    for k in range(max(len(found) for found in runs.values())):
        ranges = {p: (found[k][0].first, found[k][-1].last + 1) for p, found in runs.items() if k < len(found)}
        where = " OR ".join(f"(partition = {p} AND offset >= {a} AND offset < {b})" for p, (a, b) in ranges.items())
        rows = rs_reader.log_ranges(path, txn.read_version, ranges, storage=storage) if in_driver else None
        if arrival:
            rows = rows if in_driver else to_arrow(log.where(where))
            written_by = write_segments(txn, rows, [(p, a, b) for p, (a, b) in ranges.items()])
        elif in_driver:
            written = txn.write_rows(rows.sort_by([("partition", "ascending"), ("offset", "ascending")]),
                                     data_change=False)
            written_by = {p: [f for f in written if f.partition_values.get("partition") == str(p)] for p in ranges}
        else:
            written = txn.write(log.where(where).coalesce(1).sortWithinPartitions("partition", "offset"),
                                data_change=False)
            written_by = {p: [f for f in written if f.partition_values.get("partition") == str(p)] for p in ranges}
        for p, (a, b) in ranges.items():
            mine = written_by.get(p, [])
            count = sum(f.num_records or 0 for f in mine)
            if count != b - a:
                raise OffsetCheckError(f"compaction of partition {p} offsets {a}..{b - 1} read {count} records, "
                                       f"not {b - a}; nothing was committed")
            removed.update({f.path: f for f in runs[p][k]})
            merged[p] += len(runs[p][k]) - len(mine)
    txn.remove((f.action() for f in removed.values()), data_change=False)
    crash_point("compact:before_commit")
    version = txn.commit_as("OPTIMIZE", {})
    # Kept only if no other commit landed between this transaction's read and its commit.
    listing[:] = [_Listing(version=version, files=files)] if version == txn.read_version + 1 else []
    return [Compaction(partition=p, files_before=len(files[p]), files_after=len(files[p]) - merged[p],
                       records=sum(f.records for run in found for f in run), version=version)
            for p, found in sorted(runs.items())]
