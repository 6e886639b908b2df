"""``format("lakelog")`` for ``spark.read`` and ``spark.readStream``: a topic as Spark's Kafka
source gives one, with the resize gates applied to every micro-batch.

Built on Spark's Python Data Source API: the driver side plans (which offsets a batch covers) and
each task reads one partition's offset range and yields Arrow record batches, so rows never pass
through Python one by one. Both sides read the Delta tables with delta-rs, at the log version the
batch was planned on (a retirement's purge committed meanwhile cannot shorten a read), without
asking Spark's JVM for anything: the planner runs in a Python worker with no Spark session.

A stream's offsets (its checkpoint, the source of truth as with Kafka's source) are
``pipelines.spark.offsets.StreamOffset``s: per topic its incarnation, its view and its positions,
in a JSON that changes only when a position does. Each
micro-batch ends where ``pipelines.gating.plan_ranges`` lets the stream's own positions go: the
stream is the one reader of the partitions it reads, so records written after a resize wait until
every record before it was in an earlier micro-batch (rules 8-10 of the protocol), exactly as a
group's batches do.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from control_plane.fast_reads import FastTopicReader
from control_plane.topics import live_record
from log_store import rs_reader
from log_store.errors import InvalidConfigurationError
from log_store.files import is_remote, local_path
from log_store.object_store import storage_from_s3a
from pipelines.spark.offsets import StreamOffset, TopicOffset
from pipelines.spark.options import SinkOptions, parse_sink_options, parse_source_options
from pipelines.spark.planner import UNLIMITED, DataLossError, Planner, Positions, RangePartition, resolve_root
from pipelines.spark.positions import ending_positions
from pipelines.spark.sink import (
    BatchWriter, Committer, StreamWriter, check_sink_schema, checkpoint_of, staging_dir, stream_producer_id,
)

FORMAT = "lakelog"
# Spark's Kafka source's columns, then the record's leader epoch.
KAFKA_COLUMNS = ("key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, "
                 "timestampType INT")
HEADERS_COLUMN = "headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
EPOCH_COLUMN = "leader_epoch INT"
_HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def source_schema(include_headers: bool) -> str:
    return ", ".join([KAFKA_COLUMNS, *([HEADERS_COLUMN] if include_headers else []), EPOCH_COLUMN])


# -- reading (executor side) ----------------------------------------------------------------------
def read_range(part: RangePartition, include_headers: bool) -> Iterator[pa.RecordBatch]:
    """The records of ``part`` as Arrow batches in the source's columns, by partition and offset."""
    columns = ["key", "value", "partition", "offset", "timestamp", "leader_epoch", *(["headers"] if include_headers else [])]
    table = rs_reader.offset_ranges(part.location, part.version, part.spans, columns, part.storage)
    expected = sum(e - s for _p, s, e in part.spans)
    if table.num_rows != expected:
        named = ", ".join(f"partition {p} offsets {s}-{e - 1}" for p, s, e in part.spans)
        raise DataLossError(f"topic '{part.topic}': {named} should hold {expected} records at log version "
                            f"{part.version}, found {table.num_rows}")
    n = table.num_rows
    arrays = [
        table.column("key").cast(pa.binary()), table.column("value").cast(pa.binary()),
        pa.array([part.topic] * n, pa.string()), table.column("partition").cast(pa.int32()),
        table.column("offset").cast(pa.int64()), table.column("timestamp").cast(pa.timestamp("us", tz="UTC")),
        pa.array([0] * n, pa.int32()),  # CreateTime, as Kafka's source says of producer timestamps
    ]
    names = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    if include_headers:
        arrays.append(_header_list(table.column("headers")))
        names.append("headers")
    arrays.append(table.column("leader_epoch").cast(pa.int32()))
    names.append("leader_epoch")
    yield from pa.Table.from_arrays(arrays, names=names).to_batches()


def _header_list(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """Headers as Kafka's source gives them, a list of (key, value) structs: a log of this release
    holds them so; an earlier release's map is cast to one by Arrow (a map is a list of key-value
    entries), without a Python loop."""
    return column.cast(_HEADER_TYPE)


class _BatchReader(DataSourceReader):
    def __init__(self, planner: Planner) -> None:
        self.planner = planner
        topics = planner.topics()
        starts = planner.starting(topics)
        bounds = planner.bounds(topics)
        ends = ending_positions(planner.opts.ending, bounds)
        for topic, per_partition in starts.items():
            for p, s in per_partition.items():
                lo, hi = bounds[topic][p]
                if not lo <= s <= hi and planner.opts.fail_on_data_loss:
                    raise DataLossError(
                        f"topic '{topic}' partition {p}: starting offset {s} is outside the log ({lo}-{hi}); "
                        "give an offset in range, or set failOnDataLoss to false to start at the nearest")
        self.start = StreamOffset({t: TopicOffset(topics[t].topic_id, None, {p: max(s, bounds[t][p][0]) for p, s in ps.items()})
                                   for t, ps in starts.items()})
        self.end = StreamOffset({t: TopicOffset(topics[t].topic_id, None,
                                                {p: min(max(e, 0), bounds[t][p][1]) for p, e in ps.items()})
                                 for t, ps in ends.items()})
        planner.pin(self.end, topics)

    def partitions(self):
        return self.planner.ranges(self.start, self.end)

    def read(self, partition: RangePartition):
        return read_range(partition, self.planner.opts.include_headers)


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream's reader: its offsets are ``StreamOffset``s in their canonical JSON (what Spark
    keeps in the checkpoint and compares)."""

    def __init__(self, planner: Planner) -> None:
        self.planner = planner
        self._available_now: dict[str, Positions] | None = None

    def initialOffset(self) -> dict:
        offset = self.planner.initial()
        self.planner.publish(offset)  # the group counts from the start, before its first batch
        return offset.to_json()

    def getDefaultReadLimit(self):
        cap = self.planner.opts.max_offsets_per_trigger
        return ReadMaxRows(cap) if cap else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read what the log holds now, in capped batches, then stop."""
        self._available_now = {t: dict(now.snap.log_ends) for t, now in self.planner.topics().items()}

    def latestOffset(self, start: dict, limit) -> dict:
        begun = StreamOffset.from_json(start)
        self.planner.publish(begun)  # what earlier micro-batches delivered (Spark commits the last one late)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else UNLIMITED
        return self.planner.next_end(begun, max_rows, self._available_now).to_json()

    def partitions(self, start: dict, end: dict):
        return self.planner.ranges(StreamOffset.from_json(start), StreamOffset.from_json(end))

    def read(self, partition: RangePartition):
        return read_range(partition, self.planner.opts.include_headers)

    def commit(self, end: dict) -> None:
        self.planner.publish(StreamOffset.from_json(end))


class LakelogDataSource(DataSource):
    """``format("lakelog")``. ``default_root``: the root when no ``root`` option is given;
    ``gateway``: the driver JVM's py4j gateway, where writes produce; ``s3a``: the session's S3A
    settings (``fs.s3a.*``), whence a root on S3 takes its endpoint and credentials for delta-rs
    and pyarrow (all three set by ``register``)."""

    default_root: str | None = None
    gateway: str | None = None
    s3a: dict[str, str] = {}

    def storage_for(self, root: str, given: dict[str, str]) -> dict[str, str]:
        """delta-rs storage options for ``root``: the ``storage.*`` options over the session's S3A
        settings (an option given either way wins whole: keys are compared lower-cased)."""
        derived = storage_from_s3a(self.s3a, root)
        given_keys = {k.lower() for k in given}
        return {**{k: v for k, v in derived.items() if k not in given_keys}, **given}

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        """Spark asks for the schema at ``load()``, before it says whether a read is a batch or a
        stream: the options are checked here (as either), and named topics must exist, so a bad
        read fails at ``load()`` rather than in a stream's first batch."""
        options = dict(self.options)
        try:
            opts = parse_source_options(options, streaming=True)
        except InvalidConfigurationError:
            opts = parse_source_options(options, streaming=False)  # valid as a batch read only, or raises
        root = resolve_root(opts.root, self.default_root)
        planner = Planner(root, opts, storage=self.storage_for(root, opts.storage))
        planner.bounds(planner.topics())  # assigned partitions must exist
        return source_schema(_include_headers(self.options))

    def _planner(self, streaming: bool) -> Planner:
        opts = parse_source_options(dict(self.options), streaming=streaming)
        if opts.group and not streaming:
            raise InvalidConfigurationError(
                "the group option is for streams (spark.readStream): a batch read keeps no positions")
        root = resolve_root(opts.root, self.default_root)
        return Planner(root, opts, self.gateway, self.storage_for(root, opts.storage))

    def reader(self, schema: StructType) -> DataSourceReader:
        return _BatchReader(self._planner(streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        planner = self._planner(streaming=True)
        planner.topics()  # unknown topics fail at start(), not at the first batch
        return _StreamReader(planner)

    def _committer(self, schema: StructType, overwrite: bool) -> tuple[Committer, SinkOptions]:
        if overwrite:
            raise InvalidConfigurationError(
                "a lakelog topic is a log: records are appended, never overwritten; use mode('append')")
        opts = parse_sink_options(dict(self.options))
        check_sink_schema(schema, opts)
        root = resolve_root(opts.root, self.default_root, writing=True)
        storage = self.storage_for(root, opts.storage)
        if opts.topic:
            images = FastTopicReader(root, storage).images()
            live_record(images[opts.topic].latest if opts.topic in images else None, opts.topic, root)
        return Committer(self.gateway, root, opts, staging_dir(root), storage), opts

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return BatchWriter(self._committer(schema, overwrite)[0])

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        committer, opts = self._committer(schema, overwrite)
        producer_id, query = stream_producer_id(opts, dict(self.options), committer.storage)
        committer.staging = staging_dir(committer.root, query)
        return StreamWriter(committer, producer_id, checkpoint_of(dict(self.options)))


def _include_headers(options) -> bool:
    return str(dict(options).get("includeHeaders", dict(options).get("includeheaders", "false"))).strip().lower() == "true"


def register(spark, root: str | None = None) -> None:
    """Make ``format("lakelog")`` known to ``spark``. ``root`` (default ``$LAKELOG_ROOT``) is used
    when a read or write gives no ``root`` option."""
    from log_store.session import gateway_of, hadoop_settings

    default = root or os.environ.get("LAKELOG_ROOT")
    source = type("LakelogDataSource", (LakelogDataSource,),
                  {"default_root": str(local_path(default)) if default and not is_remote(default) else default,
                   "gateway": gateway_of(spark), "s3a": hadoop_settings(spark, "fs.s3a.")})
    spark.dataSource.register(source)

