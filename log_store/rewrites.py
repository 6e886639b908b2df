"""A log's files rewritten for a layout or a purge (docs/storage-format.md, "A log's layout"):
moving a log between the partitioned and arrival layouts, and deleting a retired partition's rows
from files it may share with live partitions. The file planning they rest on is
``log_store.log_files``."""

from __future__ import annotations

from pydantic import BaseModel
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from log_store import commits
from log_store.crash import crash_point
from log_store.delta_errors import retry_on_conflict
from log_store.errors import ConcurrentCommitError, InvalidConfigurationError, OffsetCheckError
from log_store.rs_engine import RsTransaction
from log_store.file_compaction import COMMIT_BYTES
from log_store.log_files import (
    RANGES_TAG,
    DataFile,
    decode_ranges,
    encode_ranges,
    meta_layout,
    partition_files,
    to_arrow,
    write_segments,
    written_ranges,
)
from log_store.log_metadata import ARRIVAL, LAYOUT_PROP, LAYOUTS
from log_store.frames import parallelism
from log_store.log_writers import ranges_tags


def delete_below(spark: SparkSession, path: str, ends: dict[int, int]) -> list[int]:
    """Delete each partition's rows below ``ends[p]`` (a retired partition's, rule 7) in a
    commit recorded as Delta's DELETE; return the partitions it deleted rows of (call again until
    none: an arrival log's commit takes at most COMMIT_BYTES of files). A partitioned log runs
    Delta's DELETE. An arrival log's files shared with other partitions are rewritten without the
    deleted rows, the others' rows as segments of one partition each (tagged, like compaction's);
    the deleted rows go to the change feed as deletes, as Delta's DELETE writes them, so the feed
    shows no row inserted twice. Raises ConcurrentCommitError when another commit removed a file
    first (the caller retries)."""
    txn = commits.start(spark, path, "the log table")
    files = partition_files(txn)

    def doomed(f: DataFile) -> bool:
        return f.partition in ends and f.first < ends[f.partition]

    holding = sorted({f.partition for p in ends for f in files.get(p, []) if doomed(f)})
    if not holding:
        return []
    if meta_layout(txn) != ARRIVAL:
        if isinstance(txn, RsTransaction):  # delta-rs's DELETE (it writes the change feed's deletes as Delta's does)
            txn.release()
            _delete_with_delta_rs(path, " OR ".join(f'("partition" = {p} AND "offset" < {ends[p]})' for p in holding),
                                  txn.storage)
            return holding
        cond = " OR ".join(f"(partition = {p} AND offset < {ends[p]})" for p in holding)
        spark.sql(f"DELETE FROM delta.`{path}` WHERE {cond}")
        return holding
    views: dict[str, list[DataFile]] = {}
    for fs in files.values():
        for f in fs:
            views.setdefault(f.path, []).append(f)
    hit = [vs for _path, vs in sorted(views.items()) if any(doomed(f) for f in vs)]
    batch, size = [], 0
    for vs in hit:  # at most COMMIT_BYTES of files a commit; the rest in the next
        if batch and size + (vs[0].file_size or vs[0].size) > COMMIT_BYTES:
            break
        batch.append(vs)
        size += vs[0].file_size or vs[0].size
    kept = [(f.partition, f.first, f.last + 1) for vs in batch for f in vs if not doomed(f)]
    # A file's records: fewer than its offsets once its keys were compacted (log_store.cleaning).
    records = {(f.partition, f.first, f.last + 1): f.records for vs in batch for f in vs}
    for vs in batch:
        for f in vs:
            if doomed(f) and f.last >= ends[f.partition]:
                raise OffsetCheckError(f"{f.path} of {path} holds partition {f.partition}'s offsets {f.first}..{f.last} "
                                       f"across the end {ends.get(f.partition)} to delete below; nothing was deleted. "
                                       "This is a bug in lakelog")
    log = spark.read.format("delta").option("versionAsOf", txn.read_version).load(path)
    gone = [(f.partition, f.first, f.last + 1) for vs in batch for f in vs if doomed(f)]
    if kept:
        where = " OR ".join(f"(partition = {p} AND offset >= {a} AND offset < {b})" for p, a, b in kept)
        written = write_segments(txn, to_arrow(log.where(where)), kept, data_change=True)
        for p, a, b in kept:
            count = sum(w.num_records or 0 for w in written.get(p, []) if a <= w.min_values.get("offset", -1) < b)
            if count != records[(p, a, b)]:
                raise OffsetCheckError(f"rewriting partition {p} offsets {a}..{b - 1} of {path} read {count} records, "
                                       f"not {records[(p, a, b)]}; nothing was deleted")
    where = " OR ".join(f"(partition = {p} AND offset >= {a} AND offset < {b})" for p, a, b in gone)
    if isinstance(txn, RsTransaction):
        txn.write_changes(to_arrow(log.where(where)), "delete")
    else:
        txn.write(log.where(where).withColumn("_change_type", F.lit("delete")).coalesce(1))
    txn.remove((vs[0].action() for vs in batch), data_change=True)
    txn.commit_as("DELETE", {})
    return sorted({f.partition for vs in batch for f in vs if doomed(f)})


def _delete_with_delta_rs(path: str, predicate: str, storage: dict[str, str] | None) -> None:
    from deltalake.exceptions import CommitFailedError

    from log_store.rs_tables import open_table

    try:
        open_table(path, storage).delete(predicate)
    except CommitFailedError as exc:
        raise ConcurrentCommitError(f"the log at {path} changed while rows were deleted") from exc


class LayoutChange(BaseModel):
    previous: str
    layout: str
    files_before: int
    files_after: int
    records: int
    version: int | None = None  # None: the log had the layout already


def _stats_columns(text: str | None, with_partition: bool) -> dict[str, str]:
    """The statistics property for a layout: an arrival file needs ``partition``'s (reads skip
    files by it); a partitioned log cannot have it (a partition column has no statistics)."""
    if text is None:
        return {}
    columns = [c for c in text.split(",") if c.strip() and c.strip() != "partition"]
    return {"delta.dataSkippingStatsColumns": ",".join((["partition"] if with_partition else []) + columns)}


def change_layout(spark: SparkSession, path: str, layout: str) -> LayoutChange:
    """Rewrite every file of the log in ``layout`` in one commit recorded as Delta's OPTIMIZE (no
    record changes: offsets, epochs, producer ids and the log's set transactions stay; time travel
    reads the old files). Partitioned: a file per partition. Arrival: each write task takes whole
    partitions sorted by offset, and each file's partition ranges are read back into its tags.
    An append committing before it makes it start again (it reads the whole table); one
    committing after it conflicts on its metadata change and is made again in the new layout."""
    if layout not in LAYOUTS:
        raise InvalidConfigurationError(f"unknown layout {layout!r}: give one of {', '.join(LAYOUTS)}")

    def attempt() -> LayoutChange:
        txn = commits.start(spark, path, "the log table")
        # It reads every file: an append committing before it makes it conflict and start again
        # (otherwise its files, written for the old layout, would stay inside the new one).
        txn.read_whole_table()
        previous, files = meta_layout(txn), txn.files()
        if previous == layout:
            return LayoutChange(previous=previous, layout=layout, files_before=len(files), files_after=len(files),
                                records=sum(f.records for fs in partition_files(txn).values() for f in fs))
        log = spark.read.format("delta").option("versionAsOf", txn.read_version).load(path)
        records = log.count()
        stats = txn.configuration().get("delta.dataSkippingStatsColumns")
        by_partition = log.repartition(parallelism(spark), "partition") \
            .sortWithinPartitions("partition", "offset")
        if layout == ARRIVAL:
            txn.repartition_table([], {LAYOUT_PROP: ARRIVAL, **_stats_columns(stats, True)})
            if isinstance(txn, RsTransaction):  # each task tags its file with the ranges of its rows
                written = txn.write(by_partition, data_change=False, hold=True, tags_of=ranges_tags)
                per_file = {f.path: decode_ranges(f.add["tags"][RANGES_TAG]) for f in written}
            else:
                written = txn.write(by_partition, data_change=False, hold=True)
                per_file = written_ranges(spark, txn, written)
            txn.add(written, {name: {RANGES_TAG: encode_ranges(found)} for name, found in per_file.items()})
        else:
            txn.repartition_table(["partition"], _stats_columns(stats, False), drop=[LAYOUT_PROP])
            written = txn.write(by_partition, data_change=False)
        count = sum(f.num_records or 0 for f in written)
        if count != records:
            raise OffsetCheckError(f"rewriting {path} in the {layout} layout wrote {count} records, not {records}; "
                                   "nothing was committed")
        txn.remove(files, data_change=False)
        crash_point("layout:before_commit")
        version = txn.commit_as("OPTIMIZE", {})
        return LayoutChange(previous=previous, layout=layout, files_before=len(files), files_after=len(written),
                            records=records, version=version)

    return retry_on_conflict(attempt)
