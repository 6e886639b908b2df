"""The rows of a planned ``format("lakelog")`` read (``planner.TopicRead``: offset ranges of a
topic's partitions at one log version) as a DataFrame of Spark's Kafka source's columns.

Two ways, by where the log is (``Planner.spark_reads``):

- **Spark's Parquet reader** (local roots, and S3 roots the session's S3A reaches): the log's files
  that hold the ranges, listed from the log's Delta snapshot with delta-rs (with their sizes, so
  Spark lists nothing: ``lakelog.spark.KnownFiles``), read by Spark with an offset filter; rows
  never pass through Python, as with Delta's own source. A log whose files
  need Delta's reader (deletion vectors, column mapping) goes the second way.
- **delta-rs in Spark's Python workers** (Google Cloud Storage, Azure, S3 credentials given to
  delta-rs only; ``minPartitions`` and ``maxRecordsPerPartition``, which cut ranges by offset):
  each task reads its ranges with delta-rs and yields Arrow batches.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType,
)

from log_store import rs_reader
from log_store.delta_classes import jvm
from log_store.delta_errors import missing_file
from log_store.errors import LakelogError, LeaderNotAvailableError
from log_store.headers import HEADERS_TYPE, headers_as
from log_store.log_metadata import LogSnapshot
from log_store.read_ranges import range_filter
from log_store.timestamp_types import CODES, TimestampTypes
from log_store.txn_marks import CONTROL_COLUMN, AbortedSpan
from log_store.txn_reads import aborted_predicate, aborted_rows, aborted_spans_in, records_predicate
from pipelines.spark.tasks import Span, plan_tasks

_HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def source_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source's columns, then the record's leader epoch. Built in Python: a DDL
    string is parsed in the JVM (a DataFrame and a dozen py4j calls, at every read's start)."""
    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()), StructField("topic", StringType()),
              StructField("partition", IntegerType()), StructField("offset", LongType()),
              StructField("timestamp", TimestampType()), StructField("timestampType", IntegerType())]
    if include_headers:
        fields.append(StructField("headers", ArrayType(header)))
    return StructType([*fields, StructField("leader_epoch", IntegerType())])


class DataLossError(LakelogError):
    """Records a read was to deliver are gone (retired, deleted below its position, or the topic
    deleted) and failOnDataLoss is on."""


def read_lost(exc: BaseException) -> LeaderNotAvailableError | None:
    """The lakelog error for a query that failed because a file its micro-batch planned to read
    was missing (Spark's ``FILE_NOT_EXIST``, also inside a sink's write), or None. Spark's Parquet
    reader reads the files of one root, planned with the batch: a root lost between the plan and the
    read (or the topic deleted meanwhile) fails the query, as Spark fails for any file gone from
    under a planned scan. Run again on its checkpoint, the query plans again at the topic's leader,
    waiting for the root or an election, and reads the batch's offsets from there."""
    path = missing_file(exc)
    if path is None:
        return None
    error = LeaderNotAvailableError(
        f"a file this micro-batch planned to read was missing when it was read ({path or 'unnamed'}): its root was "
        "lost (or the topic deleted) between the batch's plan and its read. Run the query again on its checkpoint: "
        "it reads the batch again from the topic's leader, waiting for the root or an election for at most "
        "leaderWaitTimeout (retriable)")
    error.__cause__ = exc
    return error


@dataclass(frozen=True)
class TopicRead:
    """What a read takes of one topic: ``spans`` (partition, start, end) of the log at
    ``location`` as of its Delta ``version``; ``storage``: delta-rs storage options."""

    topic: str
    location: str
    version: int
    spans: tuple[Span, ...]
    timestamp_types: TimestampTypes = TimestampTypes()
    storage: dict[str, str] | None = None
    # (partition, offset) pairs: where a partition's offsets are dense again (``LogSnapshot.dense_from``);
    # below, key compaction left gaps. A partition absent is dense throughout.
    dense_from: tuple[tuple[int, int], ...] = ()
    # (partition, span) pairs: aborted transactions' records left out (read_committed; ``with_aborted``).
    aborted: tuple[tuple[int, AbortedSpan], ...] = ()

    def aborted_spans(self) -> dict[int, list[AbortedSpan]]:
        out: dict[int, list[AbortedSpan]] = {}
        for p, span in self.aborted:
            out.setdefault(p, []).append(span)
        return out


def with_aborted(read: TopicRead, snap: LogSnapshot) -> TopicRead:
    """``read`` leaving out the aborted transactions' records in its spans (read_committed), found
    from the markers at ``snap``'s version (``txn_reads.aborted_spans_in``)."""
    ranges: dict[int, tuple[int, int]] = {}
    for p, s, e in read.spans:
        lo, hi = ranges.get(p, (s, e))
        ranges[p] = (min(lo, s), max(hi, e))
    found = aborted_spans_in(lambda r, v: rs_reader.log_markers(read.location, v, r, read.storage), ranges, snap)
    return replace(read, aborted=tuple((p, span) for p, spans in sorted(found.items()) for span in spans))


def delivered(rows: pa.Table, aborted: Mapping[int, list[AbortedSpan]]) -> pa.Array:
    """Which of ``rows`` (partition, offset, and ``control`` and ``producer_id`` where present) a
    read delivers: no marker, none of ``aborted``'s records."""
    keep = (pc.is_null(rows.column(CONTROL_COLUMN)) if CONTROL_COLUMN in rows.column_names
            else pa.array([True] * rows.num_rows, pa.bool_()))
    partitions = rows.column("partition")
    if aborted:  # as delta-rs gives them (string views), which some of pyarrow's kernels do not take
        rows = rows.select(["offset", "producer_id"]).cast(pa.schema([("offset", pa.int64()), ("producer_id", pa.string())]))
    for p, spans in aborted.items():
        hit = pc.and_(pc.equal(partitions, p), aborted_rows(rows, spans))
        keep = pc.and_(keep, pc.invert(hit))
    return keep


def frame(spark: SparkSession, reads: list[TopicRead], include_headers: bool, spark_reads: bool,
          min_partitions: int | None = None, max_records: int | None = None) -> DataFrame:
    """The records of ``reads`` in the source's columns (no order across tasks)."""
    schema = source_schema(include_headers)
    reads = [r for r in reads if r.spans]
    if not reads:
        return spark.createDataFrame([], schema)
    by_tasks = min_partitions is not None or max_records is not None
    frames = []
    for r in reads if spark_reads and not by_tasks else []:
        files = rs_reader.range_files(r.location, r.version, r.spans, r.storage)
        frames.append(_files_frame(spark, r, files, include_headers) if files is not None else None)
    if len(frames) == len(reads) and all(f is not None for f in frames):
        return functools.reduce(DataFrame.unionByName, frames)
    return _tasks_frame(spark, reads, schema, include_headers, min_partitions, max_records)


def _files_frame(spark: SparkSession, read: TopicRead, files: rs_reader.RangeFiles,
                 include_headers: bool) -> DataFrame:
    """Spark's Parquet reader over ``files`` (partition values from the folder names of a
    partitioned log), the ranges' rows only, in the source's columns."""
    if not files.paths:
        return spark.createDataFrame([], source_schema(include_headers))
    table_schema = StructType.fromJson(files.schema)
    hadoop = _hadoop_uri  # Spark's S3 file system is S3A's: s3:// is read as s3a://
    # Spark's reader over files the log lists with their sizes: none is looked up or listed again
    known = "\n".join(f"{hadoop(p)}\t{n}\t{t}" for p, n, t in zip(files.paths, files.sizes, files.times))
    scan = jvm(spark, "lakelog.spark.KnownFiles").parquet(spark._jsparkSession, hadoop(files.base), known,
                                                          json.dumps(files.schema))
    rows = DataFrame(scan, spark).where(F.expr(range_filter({p: (s, e) for p, s, e in read.spans})))
    if CONTROL_COLUMN in table_schema.names:  # no marker (a log of an earlier release: no column, none)
        rows = rows.where(records_predicate("`"))
    aborted = aborted_predicate(read.aborted_spans(), "`")
    if aborted:
        rows = rows.where(f"NOT ({aborted})")
    columns: list[Column] = [
        F.col("key"), F.col("value"), F.lit(read.topic).alias("topic"), F.col("partition").cast("int").alias("partition"),
        F.col("offset"), F.col("timestamp").cast("timestamp").alias("timestamp"),
        F.expr(read.timestamp_types.sql()).cast("int").alias("timestampType"),
    ]
    if include_headers:
        columns.append(headers_as("headers", table_schema["headers"].dataType, HEADERS_TYPE))
    columns.append(F.col("leader_epoch").cast("int").alias("leader_epoch"))
    return rows.select(*columns)


def _hadoop_uri(path: str) -> str:
    return "s3a://" + path[len("s3://"):] if path.startswith("s3://") else path


@dataclass(frozen=True)
class RangeTask:
    """One Python task's reading: records of some spans of one topic, at one log version."""

    read: TopicRead
    spans: tuple[Span, ...]


def _tasks_frame(spark: SparkSession, reads: list[TopicRead], schema: StructType, include_headers: bool,
                 min_partitions: int | None, max_records: int | None) -> DataFrame:
    """Tasks reading the spans with delta-rs (``range_tasks``)."""
    tasks = range_tasks(reads, min_partitions, max_records)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for i in batch.column(0).to_pylist():
                yield from read_range(tasks[i], include_headers)

    return spark.range(0, len(tasks), 1, len(tasks)).mapInArrow(run, schema)


def range_tasks(reads: list[TopicRead], min_partitions: int | None = None,
                max_records: int | None = None) -> list[RangeTask]:
    """The tasks that read ``reads`` with delta-rs, cut as ``tasks.plan_tasks`` cuts them."""
    planned = plan_tasks({r.topic: list(r.spans) for r in reads if r.spans}, min_partitions, max_records)
    return [RangeTask(r, tuple(group)) for r in reads if r.spans for group in planned[r.topic]]


def read_range(task: RangeTask, include_headers: bool) -> Iterator[pa.RecordBatch]:
    """The records of ``task`` as Arrow batches in the source's columns, by partition and offset;
    fewer rows than its ranges hold where offsets are dense is data loss (files removed under a
    planned read): a transaction's marker is a row there, and an aborted record too, though neither
    is delivered. Offsets key compaction removed are gaps, as in Kafka's compacted topics: not counted."""
    read = task.read
    columns = ["key", "value", "partition", "offset", "timestamp", "leader_epoch", *(["headers"] if include_headers else []),
               *(["producer_id"] if read.aborted else [])]
    table = rs_reader.offset_ranges(read.location, read.version, list(task.spans), columns, read.storage,
                                    controls=True)
    # markers and aborted records are in the log: counted here, left out after
    short = missing_records(table, task.spans, dict(read.dense_from))
    if short:
        named = ", ".join(f"partition {p} offsets {s}-{e - 1} should hold {n} records, found {k}"
                          for p, s, e, n, k in short)
        raise DataLossError(f"topic '{read.topic}' at log version {read.version}: {named}")
    keep = delivered(table, read.aborted_spans())
    n = table.num_rows
    arrays = [
        table.column("key").cast(pa.binary()), table.column("value").cast(pa.binary()),
        pa.array([read.topic] * n, pa.string()), table.column("partition").cast(pa.int32()),
        table.column("offset").cast(pa.int64()), table.column("timestamp").cast(pa.timestamp("us", tz="UTC")),
        _timestamp_types(read.timestamp_types, table),
    ]
    names = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    if include_headers:
        arrays.append(table.column("headers").cast(_HEADER_TYPE))  # an earlier release's map is a list of entries
        names.append("headers")
    arrays.append(table.column("leader_epoch").cast(pa.int32()))
    names.append("leader_epoch")
    yield from pa.Table.from_arrays(arrays, names=names).filter(keep).to_batches()


def missing_records(table: pa.Table, spans: tuple[Span, ...], dense_from: dict[int, int]
                    ) -> list[tuple[int, int, int, int, int]]:
    """The dense parts of ``spans`` (from ``dense_from[p]`` on) whose records ``table`` (columns
    partition and offset) lacks, each as (partition, start, end, records due, records found)."""
    partitions = table.column("partition").to_numpy()
    offsets = table.column("offset").to_numpy()
    out = []
    for p, s, e in spans:
        lo = min(max(s, dense_from.get(p, s)), e)
        found = int(((partitions == p) & (offsets >= lo) & (offsets < e)).sum())
        if found != e - lo:
            out.append((p, lo, e, e - lo, found))
    return out


def _timestamp_types(types: TimestampTypes, table: pa.Table) -> pa.Array:
    """Each record's timestampType (0 CreateTime, 1 LogAppendTime), by the log's switches
    (``log_store.timestamp_types``): one vectorized step per switch."""
    codes = np.zeros(table.num_rows, dtype=np.int32)
    if types.switches:
        partitions = table.column("partition").to_numpy()
        offsets = table.column("offset").to_numpy()
        for switch in types.switches:
            since = np.zeros(table.num_rows, dtype=np.int64)
            for p, first in switch.since.items():
                since[partitions == p] = first
            codes = np.where(offsets >= since, CODES[switch.kind], codes).astype(np.int32)
    return pa.array(codes, pa.int32())
