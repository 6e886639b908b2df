"""``format("lakelog")`` on Spark's Python Data Source API (``pyspark.sql.datasource``), reads and writes, for
sessions lakelog's JVM source cannot serve: a Spark Connect client has no py4j gateway for the JVM
source to call back, and a serverless cluster takes no jar. One data source serves a classic session
and a Connect session alike (``register``).

The rules are the JVM source's, in the same code: the options (``options``), where a read starts
and each micro-batch ends under the resize gates (``planner``), what was skipped (``losses``), the
offsets (``offsets``). Spark runs the planning methods in a Python worker on the driver, with no
Spark session: the planner reads the root with delta-rs, and a ``group`` commits its positions
through lakelog's own engine (delta-rs, no JVM) on local and S3 roots. Each task reads its offset
ranges with delta-rs (``reading.read_range``) and hands Spark Arrow record batches.

A write (``df.write``, a stream's micro-batch) is the JVM sink's, in the same code
(``sink.produce``): one fenced append per topic through lakelog's producer, a stream's
micro-batch numbered and stamped so that its replay after a lost commit lands nothing. Spark's
tasks stage their rows as Parquet files under the root (``RootLayout.staging``); the writer's
``commit``, in a Python worker on the driver, reads them in task order and appends them through
lakelog's engine (delta-rs, the producer's path for rows in the driver: numbered, partitioned
and re-partitioned on a resize there), then deletes them, as ``abort`` does. A log's offsets are
dense from its end as the commit reads it, so a task cannot write the log's own files: it does
not know how many rows the tasks before it hold. Nothing is visible before the commit, and a
batch is read whole into the driver's worker.

What the Python API does not give, and so this source does not do: Spark's Kafka source metrics
(``minOffsetsBehindLatest`` ...; ``reportLatestOffset`` gives the log ends as the stream's latest
offset instead), and the source's folder in the query's checkpoint, where the JVM source keeps a
new stream's first offset. Here Spark's own offset log keeps it: Spark runs a first micro-batch
whatever the offsets say, and this source makes it empty, ending where ``startingOffsets`` put
the stream (``_StreamReader.latestOffset``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyspark.sql.datasource import (DataSource, DataSourceArrowWriter, DataSourceReader, DataSourceStreamArrowWriter,
                                    DataSourceStreamReader, InputPartition, WriterCommitMessage)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import BinaryType, IntegralType, NullType, StringType, StructType, TimestampType

from control_plane.layout import RootLayout
from log_store.errors import InvalidConfigurationError
from log_store.files import is_remote, local_path
from log_store.object_store import arrow_filesystem
from log_store.session import LazySession
from pipelines.driver_batches import HEADERS
from pipelines.spark import sink
from pipelines.spark.offsets import StreamOffset
from pipelines.spark.options import SinkOptions, SourceOptions, parse_sink_options, parse_source_options
from pipelines.spark.planner import UNLIMITED, Planner
from pipelines.spark.reading import RangeTask, TopicRead, range_tasks, read_range, source_schema
from pipelines.spark.roots import read_storage, resolve_root

FORMAT = "lakelog"
S3A_CONF = "spark.hadoop.fs.s3a."  # S3A's settings as a session's configuration gives them

_log = logging.getLogger("lakelog.spark")


class RangePartition(InputPartition):
    """One Spark task of a read: a ``reading.RangeTask`` (spans of one topic at one log version)."""

    def __init__(self, task: RangeTask) -> None:
        super().__init__(task)


def _partitions(reads: list[TopicRead], opts: SourceOptions) -> list[RangePartition]:
    return [RangePartition(t) for t in range_tasks(reads, opts.min_partitions, opts.max_records_per_partition)]


def _read(partition: RangePartition, include_headers: bool) -> Iterator[pa.RecordBatch]:
    return read_range(partition.value, include_headers)


_READ_NEEDS = ("the group option commits through lakelog's engine on local and S3 roots whose control tables it "
               "writes; this root's need Delta's engine through a session (an object store other than S3, or "
               "control tables of an earlier release): drop the group option, or read through lakelog's JVM source "
               "(pipelines.spark.register)")
_WRITE_NEEDS = ("a write commits through lakelog's engine on local and S3 roots whose tables it writes; this root's "
                "need Delta's engine through a session (an object store other than S3, or tables of an earlier "
                "release): write through lakelog's JVM sink (pipelines.spark.register) or its Producer")


def _no_session(s3a: dict[str, str], needs: str = _READ_NEEDS) -> LazySession:
    """What the planner and the writer are given for their Spark session: none can be had in a
    Python data source's worker. A group's commits and a write's appends go through lakelog's
    engine, which on a local root needs no session and on S3 only S3A's settings (given here as a
    session's configuration gives them); whatever would need a real session (a table of an
    earlier release that Delta's engine must write, a root in Google Cloud Storage or Azure)
    fails saying so (``needs``)."""

    def refuse():
        raise InvalidConfigurationError(
            f"format('lakelog') on Spark's Python data source has no Spark session in its workers: {needs}")

    return LazySession(refuse, {S3A_CONF + k: v for k, v in s3a.items()})


class _BatchReader(DataSourceReader):
    """A batch read: planned once (its tasks hold their spans and log versions); Spark pickles the
    reader for its tasks, so it keeps only the tasks, not the planner."""

    def __init__(self, planner: Planner) -> None:
        start, end = planner.batch_range()
        self.tasks = _partitions(planner.reads(start, end), planner.opts)
        self.include_headers = planner.opts.include_headers

    def partitions(self) -> list[RangePartition]:
        return self.tasks

    def read(self, partition: RangePartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.include_headers)


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream, driven as ``bridge.FormatSide`` drives the planner for the JVM source. Spark keeps
    the reader in one worker for the query's run; it also pickles a second one for its tasks'
    ``read``, so the planner is made on first use and never pickled."""

    def __init__(self, source: "LakelogDataSource", include_headers: bool) -> None:
        self._source = source
        self._planner: Planner | None = None
        self.include_headers = include_headers
        self._caps: dict[str, dict[int, int]] | None = None
        self._first: StreamOffset | None = None
        self._asked = False  # whether Spark asked for a new offset in this run

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_planner": None}

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = self._source.planner(streaming=True)
        return self._planner

    def initialOffset(self) -> dict:
        """Where ``startingOffsets`` puts the stream, taken once per run (Spark asks again when it
        runs the first micro-batch). Not committed to the group here: Spark also asks it of a
        restarted query whose first micro-batch was not recorded as done, only to start that batch
        again, while the query goes on from the batch's end in its offset log; taken anew then
        (the log start raised, ``latest`` moved), it is not where the stream is, and the group's
        positions would move back to that end. A group's positions are only ever those of Spark's
        offset log (``latestOffset``'s start, ``commit``'s end): a new query's start is committed
        by the ``latestOffset`` Spark asks right after."""
        if self._first is None:
            self._first = self.planner.initial()
        return self._first.to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        cap = self.planner.opts.max_offsets_per_trigger
        return ReadMaxRows(cap) if cap else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read what the logs hold now, in capped micro-batches, then stop."""
        self._caps = {t: dict(now.snap.log_ends) for t, now in self.planner.topics().items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """Where the next micro-batch ends; the first one of a new query ends where it starts.
        Spark runs a first micro-batch whatever the offsets, and keeps no start for it: run again
        after a restart, it asks ``initialOffset`` anew, which for ``latest`` or a time is
        somewhere else by then. Empty, it has nothing to read again, and its end, in Spark's offset
        log before it runs, keeps where the stream starts."""
        begun = StreamOffset.from_json(start)
        first = self._first_batch(begun)
        self._asked = True
        self.planner.publish(begun)  # what earlier micro-batches delivered (Spark commits the last one late)
        if first:
            return begun.to_json()
        rows = min(limit.max_rows, UNLIMITED) if isinstance(limit, ReadMaxRows) else UNLIMITED
        return self.planner.next_end(begun, rows, self._caps).to_json()

    def _first_batch(self, begun: StreamOffset) -> bool:
        """Whether ``begun`` is a new query's start (from ``initialOffset``, before any other offset
        was asked for in this run): its first micro-batch, planned now or run again."""
        return not self._asked and self._first is not None and begun == self._first

    def reportLatestOffset(self) -> dict | None:
        """The stream's latest offset in its progress: each partition's log end as the last plan read it."""
        latest = self.planner.latest()
        if not latest:
            return None
        return {"v": 1, "topics": {t: {"positions": {str(p): e for p, e in sorted(ends.items())}}
                                   for t, ends in sorted(latest.items())}}

    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        begun = StreamOffset.from_json(start)
        if start == end or self._first_batch(begun):  # the first micro-batch is empty (``latestOffset``)
            return []
        return _partitions(self.planner.reads(begun, StreamOffset.from_json(end)), self.planner.opts)

    def read(self, partition: RangePartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.include_headers)

    def commit(self, end: dict) -> None:
        self.planner.publish(StreamOffset.from_json(end))


# -- writes ----------------------------------------------------------------------------------------
@dataclass
class StagedRows(WriterCommitMessage):
    """One task's rows, staged: its file (``name``, in the write's staging folder; none for a task
    without rows) and its place in the write (``task``: Spark's partition id of the rows written)."""

    name: str
    task: int
    rows: int


def check_python_write_columns(schema: StructType) -> None:
    """The columns the Python source writes as the JVM sink does, which otherwise converts them
    with Spark's casts: key and value as string or binary, timestamp as a timestamp, sequence and
    partition as integers. Anything else is an error naming the cast to write, before a task runs."""
    types = {f.name: f.dataType for f in schema.fields}
    for name in ("key", "value"):
        if name in types and not isinstance(types[name], (StringType, BinaryType, NullType)):
            raise InvalidConfigurationError(
                f"column '{name}' is {types[name].simpleString()}: format('lakelog') on Spark's Python data source "
                f"writes {name} as string or binary; cast it (to_json(...) for a struct), or write through "
                "lakelog's JVM sink, which casts it")
    if "timestamp" in types and not isinstance(types["timestamp"], (TimestampType, NullType)):
        raise InvalidConfigurationError(
            f"column 'timestamp' is {types['timestamp'].simpleString()}: give a timestamp (an instant; cast a "
            "timestamp_ntz with to_utc_timestamp)")
    if "sequence" in types and not isinstance(types["sequence"], IntegralType):
        raise InvalidConfigurationError(
            f"column 'sequence' is {types['sequence'].simpleString()}: give an integer sequence per producerId")


def _plain_rows(rows: pa.Table) -> pa.Table:
    """Staged rows as the producer's driver path takes them (``driver_batches.is_plain``): headers
    as the log's list of (key, value) pairs, a map's entries in its order."""
    if "headers" not in rows.column_names:
        return rows
    column = rows.column("headers").combine_chunks()
    if pa.types.is_map(column.type):
        pairs = pa.StructArray.from_arrays([column.keys, column.items.cast(pa.binary())], ["key", "value"])
        column = pa.ListArray.from_arrays(column.offsets, pairs, mask=column.is_null())
    return rows.set_column(rows.schema.get_field_index("headers"), "headers", column.cast(HEADERS))


class _Staging:
    """Where a write's tasks leave their rows for the driver's commit: a folder of its own under
    the root, reached with pyarrow's file system (a local disk, or S3 with the root's storage
    options)."""

    def __init__(self, root: str, storage: dict[str, str], name: str) -> None:
        self.folder = RootLayout(root).staging(name)
        self.storage = storage or None

    def _fs(self) -> tuple[pafs.FileSystem, str]:
        return arrow_filesystem(self.folder, self.storage)

    def stage(self, batches: Iterator[pa.RecordBatch]) -> StagedRows:
        """A task's rows as one Parquet file, written as they come, named by the task and the
        attempt. A task without rows stages no file but still answers: Spark refuses a task
        whose ``write`` returns no commit message, and runs one empty task for an empty
        micro-batch (a new ``format("lakelog")`` stream's first)."""
        from pyspark import TaskContext

        context = TaskContext.get()
        task = context.partitionId() if context else 0
        name = f"task-{task:05d}-{uuid.uuid4().hex}.parquet"
        writer, rows = None, 0
        try:
            for batch in batches:
                if not batch.num_rows:
                    continue
                if writer is None:
                    fs, folder = self._fs()
                    fs.create_dir(folder, recursive=True)
                    writer = pq.ParquetWriter(f"{folder}/{name}", batch.schema, filesystem=fs)
                writer.write_batch(batch)
                rows += batch.num_rows
        finally:
            if writer is not None:
                writer.close()
        return StagedRows(name if rows else "", task, rows)

    def read(self, messages: list) -> pa.Table | None:
        """The staged rows of the tasks that wrote some, in task order: the write's order."""
        staged = sorted((m for m in messages if m is not None and m.rows), key=lambda m: m.task)
        if not staged:
            return None
        fs, folder = self._fs()
        return pa.concat_tables([pq.read_table(f"{folder}/{m.name}", filesystem=fs) for m in staged])

    def remove(self) -> None:
        """The folder and all in it, tasks' retried attempts too (none may be: an empty write)."""
        fs, folder = self._fs()
        if fs.get_file_info(folder).type != pafs.FileType.NotFound:
            fs.delete_dir(folder)


class _Writes:
    """What a batch write and a stream's micro-batches share: the options checked on the driver
    before any task runs, the tasks' staging, and the commit through ``sink.produce``."""

    def __init__(self, source: "LakelogDataSource", schema: StructType, overwrite: bool, streaming: bool) -> None:
        if overwrite:
            sink.check_mode("overwrite" if not streaming else "complete")
        self.options = dict(source.options)
        self.opts: SinkOptions = parse_sink_options(self.options)
        sink.check_sink_schema(schema, self.opts)
        check_python_write_columns(schema)
        if "partition" in {f.name for f in schema.fields}:
            raise InvalidConfigurationError(
                "column 'partition': format('lakelog') on Spark's Python data source takes each row's partition "
                "from its key; drop the column, or write through lakelog's JVM sink or Producer, which take it")
        self.root = resolve_root(self.opts.root, source.default_root, writing=True)
        self.s3a = dict(source.s3a)
        # A stream's writer is made again for its commits: its folder is the query's, by its checkpoint.
        name = (f"stream-{hashlib.blake2b(sink.stream_checkpoint(self.options).encode(), digest_size=12).hexdigest()}"
                if streaming else f"write-{uuid.uuid4().hex}")
        self.staging = _Staging(self.root, self._storage(), name)
        if self.opts.topic:  # an unknown topic fails here, before a task runs
            from control_plane.topics import TopicAdmin

            TopicAdmin(self._session(), self.root).get(self.opts.topic)

    def _storage(self) -> dict[str, str]:
        """delta-rs storage options of an S3 root: the write's ``storage.*`` over S3A's settings."""
        return read_storage(self.root, self.s3a, self.opts.storage) if is_remote(self.root) else {}

    def _session(self) -> LazySession:
        return _no_session(self.s3a, _WRITE_NEEDS)

    def land(self, messages: list, batch_id: int | None) -> None:
        """The staged rows, through the JVM sink's ``sink.produce``; the staging removed, landed or not."""
        try:
            rows = self.staging.read(messages)
            if rows is None:
                return
            rows = _plain_rows(rows)
            producer_id, checkpoint = self.opts.producer_id, None
            if batch_id is not None:
                checkpoint = sink.checkpoint_of(self.options)
                producer_id = sink.stream_producer_id(self.opts, self.options)[0]
            if self.opts.topic:
                topics = [self.opts.topic]
            else:
                topics = pc.unique(rows.column("topic")).to_pylist()

            def rows_of(topic: str) -> pa.Table:
                if self.opts.topic:
                    return rows
                return rows.filter(pc.equal(rows.column("topic"), topic)).drop_columns(["topic"])

            sink.produce(self._session(), self.root, self.opts, topics, rows_of, producer_id, batch_id, checkpoint)
        finally:
            self.staging.remove()


class _BatchWriter(DataSourceArrowWriter):
    """``df.write``: each task stages its rows; the commit appends them (``_Writes``)."""

    def __init__(self, writes: _Writes) -> None:
        self.writes = writes

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedRows:
        return self.writes.staging.stage(iterator)

    def commit(self, messages: list) -> None:
        self.writes.land(messages, None)

    def abort(self, messages: list) -> None:
        self.writes.staging.remove()


class _StreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream``: each micro-batch staged by its tasks and appended by its commit under
    the query's producer, stamped with the batch (``sink.produce``)."""

    def __init__(self, writes: _Writes) -> None:
        self.writes = writes

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedRows:
        return self.writes.staging.stage(iterator)

    def commit(self, messages: list, batchId: int) -> None:
        self.writes.land(messages, int(batchId))

    def abort(self, messages: list, batchId: int) -> None:
        self.writes.staging.remove()


class LakelogDataSource(DataSource):
    """``format("lakelog")`` for ``spark.read``, ``spark.readStream``, ``df.write`` and
    ``df.writeStream``. ``register`` makes a
    subclass carrying the session's default root and S3A settings (the workers have no session to
    ask)."""

    default_root: str | None = None
    s3a: dict[str, str] = {}

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        """Spark asks at ``load()``, before it says batch or stream: the options are checked as
        either, and named topics and assigned partitions must exist, so a bad read fails at
        ``load()``, not in a stream's first micro-batch."""
        try:
            planner = self.planner(streaming=True)
        except InvalidConfigurationError:
            planner = self.planner(streaming=False)  # valid as a batch read only, or raises
        planner.bounds(planner.topics())
        return source_schema(planner.opts.include_headers)

    def planner(self, streaming: bool) -> Planner:
        opts = parse_source_options(dict(self.options), streaming=streaming)
        if opts.group and not streaming:
            raise InvalidConfigurationError(
                "the group option is for streams (spark.readStream): a batch read keeps no positions")
        root = resolve_root(opts.root, self.default_root)
        storage = read_storage(root, self.s3a, opts.storage)
        return Planner(root, opts, _no_session(self.s3a), storage or None, spark_reads=False)

    def reader(self, schema: StructType) -> DataSourceReader:
        return _BatchReader(self.planner(streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = parse_source_options(dict(self.options), streaming=True)
        return _StreamReader(self, opts.include_headers)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return _BatchWriter(_Writes(self, schema, overwrite, streaming=False))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        return _StreamWriter(_Writes(self, schema, overwrite, streaming=True))


def register(spark, root: str | None = None, name: str = FORMAT) -> bool:
    """Make ``format(name)`` read and write lakelog's topics in ``spark``, a classic or a Spark Connect
    session, through Spark's Python data source API; True if registered. ``root`` (default
    ``$LAKELOG_ROOT``) is used when a read or write gives no ``root`` option. False where a source on the
    session's class path has the name (lakelog's JVM source has ``lakelog``): Spark refuses a
    Python source that name (``DATA_SOURCE_ALREADY_EXISTS``), and ``pipelines.spark.register``
    serves it there; this source can be registered beside it under another name."""
    default = root or os.environ.get("LAKELOG_ROOT")
    if default and not is_remote(default):
        default = str(local_path(default))
    s3a = {k[len(S3A_CONF):]: v for k, v in spark.conf.getAll.items() if k.startswith(S3A_CONF)}
    source = type("RegisteredLakelogSource", (LakelogDataSource,),
                  {"default_root": default, "s3a": s3a, "name": classmethod(lambda cls: name)})
    try:
        spark.dataSource.register(source)
    except Exception as exc:  # noqa: BLE001 - Spark's AnalysisException, classic or Connect
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc):
            raise
        _log.info("format(%r) is a source on the session's class path: the Python source is not registered", name)
        return False
    return True
