"""A topic log's data files: listing them, and deleting records below a log start offset
(retention, delete-records); merging small files is ``file_compaction``'s.

Both work in whole files and never touch a record's offset. The planning is pure
(``retention_start``, ``removable_files``); the commits go through the engine's transaction:

- **Raising a log start** removes the files wholly below it and sets the partition's log start
  (``names.log_start_app_id``) in the same commit, so every snapshot of the log has files and log
  start that agree. A file holding records on both sides stays; readers never read below the log
  start. The commit depends only on the log start ids it sets, so it never conflicts with an
  append (appends depend on log ends), and two racing raises of one partition conflict and retry.
"""

from __future__ import annotations

import json
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from log_store.arrow_files import with_tags
from log_store import commits, put_if_absent
from log_store.crash import crash_point
from log_store.engine import DeltaTransaction
from log_store.delta_errors import retry_on_conflict, translate
from log_store.errors import ConcurrentCommitError, InvalidConfigurationError, OffsetCheckError
from log_store.files import is_remote
from log_store.object_store import engine_s3, s3_storage
from log_store.log_metadata import (
    Mode,
    TopicLogMetadata,
    check_set_transactions_kept,
    layout_of,
    log_end,
)
from log_store.names import log_start_app_id

DEFAULT_TARGET_BYTES = 128 * 1024 * 1024  # a compacted file's size (Kafka's segment.bytes, smaller)


RANGES_TAG = "lakelog.ranges"  # an arrival file's rows per partition, in its add action's tags
# A file written by key compaction: when its records were first cleaned (ms) and how many tombstones
# it holds, ``<ms>:<tombstones>`` (``log_store.cleaning``: Kafka's delete horizon counts from then).
CLEANED_TAG = "lakelog.cleaned"


def encode_cleaned(cleaned_at_ms: int, tombstones: int) -> str:
    return f"{int(cleaned_at_ms)}:{int(tombstones)}"


def decode_cleaned(text: str | None) -> tuple[int | None, int | None]:
    """(cleaned at, tombstones) of a ``lakelog.cleaned`` tag; (None, None) for a file never cleaned."""
    if not text:
        return None, None
    at, _, count = text.partition(":")
    return int(at), int(count)


def encode_ranges(ranges: dict[int, tuple[int, int, int]]) -> str:
    """An arrival file's rows per partition ({partition: (first, last, rows)}) as the text of its
    ``lakelog.ranges`` tag: ``p:first-last:rows`` joined by ``;``, by partition."""
    return ";".join(f"{p}:{a}-{b}:{n}" for p, (a, b, n) in sorted(ranges.items()))


def decode_ranges(text: str) -> dict[int, tuple[int, int, int]]:
    out: dict[int, tuple[int, int, int]] = {}
    for part in text.split(";"):
        p, span, n = part.split(":")
        a, b = span.split("-")
        out[int(p)] = (int(a), int(b), int(n))
    return out


class DataFile(BaseModel):
    """One data file of a partition: its offsets [first, last], size and newest timestamp. A file
    holding several partitions (the arrival layout) is one ``DataFile`` per partition, each
    ``shared``, with the file's size divided by rows. A file key compaction wrote may hold fewer
    records than offsets (``contiguous`` is false) and says when it was cleaned."""

    model_config = ConfigDict(frozen=True)

    path: str
    partition: int
    size: int
    records: int
    first: int
    last: int
    max_timestamp_ms: int | None = None
    partition_values: dict[str, str] = {}
    shared: bool = False
    file_size: int | None = None  # the whole file's, where shared
    min_timestamp_ms: int | None = None
    cleaned_at_ms: int | None = None  # when key compaction first cleaned its records (None: never)
    tombstones: int | None = None  # its records with a null value, where key compaction wrote it

    @property
    def contiguous(self) -> bool:
        """Whether the file holds every offset in [first, last] (files lakelog writes do)."""
        return self.records == self.last - self.first + 1

    def action(self) -> dict:
        return {"path": self.path, "size": self.file_size or self.size, "partitionValues": self.partition_values}


def _millis(text: str | None) -> int | None:
    if not text:
        return None
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def data_file(add: dict) -> DataFile | None:
    """A ``DataFile`` from Delta's add action; None for a file without offset statistics."""
    stats = json.loads(add.get("stats") or "{}")
    lo, hi = stats.get("minValues", {}), stats.get("maxValues", {})
    if "offset" not in lo or "offset" not in hi or "numRecords" not in stats:
        return None
    values = add.get("partitionValues") or {}
    cleaned_at, tombstones = decode_cleaned((add.get("tags") or {}).get(CLEANED_TAG))
    return DataFile(path=add["path"], partition=int(values["partition"]), size=int(add["size"]),
                    records=int(stats["numRecords"]), first=int(lo["offset"]), last=int(hi["offset"]),
                    max_timestamp_ms=_millis(hi.get("timestamp")), min_timestamp_ms=_millis(lo.get("timestamp")),
                    partition_values=values, cleaned_at_ms=cleaned_at, tombstones=tombstones)


def data_files(add: dict) -> list[DataFile]:
    """The ``DataFile`` of each partition in Delta's add action: one for a file of one partition,
    one per partition for an arrival file (its ``lakelog.ranges`` tag); none without statistics."""
    add = with_tags(add)
    tags = add.get("tags") or {}
    ranges = tags.get(RANGES_TAG)
    if not ranges:
        f = data_file(add)
        return [] if f is None else [f]
    stats = json.loads(add.get("stats") or "{}")
    newest = _millis(stats.get("maxValues", {}).get("timestamp"))
    oldest = _millis(stats.get("minValues", {}).get("timestamp"))
    cleaned_at, tombstones = decode_cleaned(tags.get(CLEANED_TAG))
    found = decode_ranges(ranges)
    total, size = sum(n for _a, _b, n in found.values()), int(add["size"])
    return [DataFile(path=add["path"], partition=p, size=max(size * n // max(total, 1), 1), records=n, first=a,
                     last=b, max_timestamp_ms=newest, min_timestamp_ms=oldest, shared=len(found) > 1, file_size=size,
                     cleaned_at_ms=cleaned_at, tombstones=tombstones)
            for p, (a, b, n) in sorted(found.items())]


def partition_files(txn: DeltaTransaction) -> dict[int, list[DataFile]]:
    """Each partition's data files in the transaction's snapshot, by first offset."""
    out: dict[int, list[DataFile]] = {}
    for add in txn.files():
        for f in data_files(add):
            out.setdefault(f.partition, []).append(f)
    return {p: sorted(fs, key=lambda f: f.first) for p, fs in out.items()}


# -- pure rules ------------------------------------------------------------------------------------
def retention_start(files: list[DataFile], log_start: int, log_end_offset: int, now_ms: int,
                    retention_ms: int | None, retention_bytes: int | None) -> int:
    """The log start Kafka's retention gives a partition (``files`` by first offset): past the
    oldest files whose newest record is older than ``retention_ms``, and past the oldest files
    while what stays would still be at least ``retention_bytes``. Whole files only, the oldest
    first, stopping at the first file that must stay; never below ``log_start`` or past the log end.
    ``None`` (or a negative value, Kafka's -1) keeps everything."""
    live = [f for f in files if f.last >= log_start]
    start = log_start
    if retention_ms is not None and retention_ms >= 0:
        for f in live:
            if f.max_timestamp_ms is None or f.max_timestamp_ms >= now_ms - retention_ms:
                break
            start = max(start, f.last + 1)
    if retention_bytes is not None and retention_bytes >= 0:
        size = sum(f.size for f in live)
        for f in live:
            if size - f.size < retention_bytes:
                break
            size -= f.size
            start = max(start, f.last + 1)
    return min(start, log_end_offset)


def removable_files(files: dict[int, list[DataFile]], log_starts: dict[int, int]) -> list[DataFile]:
    """The files wholly below the log starts (``files``: each partition's, as ``partition_files``
    lists them): a file of one partition when its last offset is below the partition's log start,
    a shared file only when every partition's part of it is. One ``DataFile`` per file (the
    first partition's), in path order."""
    by_path: dict[str, list[DataFile]] = {}
    for p, fs in files.items():
        for f in fs:
            by_path.setdefault(f.path, []).append(f)
    return [min(views, key=lambda f: f.partition) for path, views in sorted(by_path.items())
            if all(f.last < log_starts.get(f.partition, 0) for f in views)]


# -- commits -------------------------------------------------------------------------------------
class LogStartChange(BaseModel):
    partition: int
    previous: int
    log_start: int
    files_removed: int
    version: int


def raise_log_starts(spark: SparkSession, path: str, wanted: dict[int, int],
                     check: bool = True) -> list[LogStartChange]:
    """Raise each partition's log start to ``wanted[p]`` (a lower one is left as it is): one
    commit removing the files wholly below the new log starts. ``check``: refuse an offset past
    the log end (delete-records), with nothing changed, and a partition retired or missing;
    retention passes offsets it read there, and a partition retired since it read is left out
    (its records went with it)."""

    def attempt() -> list[LogStartChange]:
        txn = commits.start(spark, path, "the log table")
        conf = txn.configuration()
        check_set_transactions_kept(conf, path)
        meta = TopicLogMetadata.from_properties(conf)
        meta.check_not_deleted()
        known = txn.snapshot_app_versions()
        changes: dict[int, tuple[int, int]] = {}
        for p, target in sorted(wanted.items()):
            pm = meta.partitions.get(p)
            if (pm is None or pm.mode is Mode.NONE) and not check:
                continue
            if pm is None or pm.mode is Mode.NONE:
                state = "does not exist" if pm is None else "was retired"
                raise InvalidConfigurationError(
                    f"partition {p} of '{meta.topic}' {state}; nothing was deleted. "
                    f"Readable partitions: {sorted(q for q, m in meta.partitions.items() if m.mode is not Mode.NONE)}")
            end = log_end(known, p, pm.start_offset)
            if check and target > end:
                raise OffsetCheckError(
                    f"partition {p} of '{meta.topic}': offset {target} is past the log end {end}; nothing was "
                    f"deleted. Give an offset up to {end} (all records: --before-offset {end})")
            current = max(pm.start_offset, known.get(log_start_app_id(p), 0))
            target = min(target, end)
            if target > current:
                changes[p] = (current, target)
        if not changes:
            return []
        files = partition_files(txn)
        starts = {p: max(first, known.get(log_start_app_id(p), 0)) for p, first in meta.earliest_offsets().items()}
        starts.update({p: new for p, (_old, new) in changes.items()})
        touched = {f.path for p in changes for f in files.get(p, [])}
        removed = [f for f in removable_files(files, starts) if f.path in touched]
        gone = {f.path for f in removed}
        for p in changes:  # a racing raise of the same partition conflicts, and this one reads again
            txn.app_version(log_start_app_id(p))
        txn.remove((f.action() for f in removed), data_change=True)
        crash_point("retention:before_commit")
        version = txn.commit_as("DELETE", {log_start_app_id(p): new for p, (_old, new) in changes.items()})
        return [LogStartChange(partition=p, previous=old, log_start=new,
                               files_removed=sum(f.path in gone for f in files.get(p, [])), version=version)
                for p, (old, new) in sorted(changes.items())]

    return retry_on_conflict(attempt)


def purge(spark: SparkSession | None, path: str) -> None:
    """Delete every row of a fenced log and remove its files at once (VACUUM without retention:
    nothing may read a deleted topic). Through delta-rs on a local root and on S3; Spark's DELETE
    and VACUUM elsewhere. Safe to repeat and to race (a lost race deletes again, finding nothing)."""
    if not is_remote(path) or engine_s3(path):
        from deltalake.exceptions import CommitFailedError

        from log_store.rs_tables import open_table

        storage = s3_storage(spark, path) if is_remote(path) else None
        put_if_absent.check(path, storage)

        def delete() -> None:
            try:
                open_table(path, storage).delete()
            except CommitFailedError as exc:
                raise ConcurrentCommitError(f"the log at {path} changed while it was emptied") from exc

        if open_table(path, storage).file_uris():
            retry_on_conflict(delete)
        # full: every file the table does not reference (the change feed's, a lost commit's), as Spark's VACUUM
        open_table(path, storage).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False, full=True)
        return
    if commits.start(spark, path, "the log table").file_count():  # any layout, any file
        retry_on_conflict(lambda: spark.sql(f"DELETE FROM delta.`{path}`"))
    conf = "spark.databricks.delta.retentionDurationCheck.enabled"
    before = spark.conf.get(conf, "true")
    spark.conf.set(conf, "false")
    try:
        spark.sql(f"VACUUM delta.`{path}` RETAIN 0 HOURS")
    finally:
        spark.conf.set(conf, before)


def meta_layout(txn: DeltaTransaction) -> str:
    return layout_of(txn.configuration())


def to_arrow(rows) -> "pa.Table":
    try:
        return rows.toArrow()
    except Exception as exc:
        raise translate(exc) from exc


def write_segments(txn: DeltaTransaction, table, ranges: list[tuple[int, int, int]], data_change: bool = False) -> dict[int, list]:
    """An arrival log's segments: the rows of each (partition, first, end) of ``ranges`` in
    ``table`` in one file of its own, sorted by offset, written from the driver (a commit's rows
    are at most COMMIT_BYTES) with the file's range in its tags, so retention and reads treat it as
    a one-partition file. ``data_change``: see ``DeltaTransaction.write``."""
    out: dict[int, list] = {}
    for p, a, b in sorted(ranges):
        part = table.filter(pc.and_(pc.equal(table.column("partition"), p),
                                    pc.and_(pc.greater_equal(table.column("offset"), a),
                                            pc.less(table.column("offset"), b)))).sort_by("offset")
        if part.num_rows:
            tags = {RANGES_TAG: encode_ranges({p: (a, a + part.num_rows - 1, part.num_rows)})}
            out.setdefault(p, []).extend(txn.write_rows(part, tags=tags, data_change=data_change))
    return out


def written_ranges(spark: SparkSession, txn: DeltaTransaction, written: list) -> dict[str, dict[int, tuple[int, int, int]]]:
    """Each file of ``written`` (not yet committed): (first, last, rows) per partition, read back
    from the files themselves in one Spark job (what an arrival file's tags then say)."""
    if not written:
        return {}
    base = txn.data_path().rstrip("/")
    by_name = {f.path.rsplit("/", 1)[-1]: f.path for f in written}
    try:
        found = (spark.read.parquet(*(f"{base}/{f.path}" for f in written))
                 .groupBy(F.col("_metadata.file_name").alias("name"), "partition")
                 .agg(F.min("offset").alias("a"), F.max("offset").alias("b"), F.count("*").alias("n")).collect())
    except Exception as exc:
        raise translate(exc) from exc
    out: dict[str, dict[int, tuple[int, int, int]]] = {}
    for r in found:
        out.setdefault(by_name[r["name"]], {})[int(r["partition"])] = (int(r["a"]), int(r["b"]), int(r["n"]))
    return out
