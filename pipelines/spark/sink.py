"""``format("lakelog")`` for ``df.write`` and ``df.writeStream``: rows produced through the fenced,
idempotent producer (``pipelines.producer.Producer``), partitioned by key as Kafka's partitioner
does, with dense offsets.

Spark's tasks stage their rows as Parquet files under the root (``_lakelog_staging/``, written
with pyarrow: a local folder, or S3 with the root's endpoint and credentials); the commit, on the
driver, produces them with one Spark session attached to the driver's JVM
(``log_store.session.attach``) and removes them. So a write lands through the same fenced
append as every produce, or not at all (an aborted write leaves nothing in the log).

A stream's micro-batch is one append per topic under the query's producer id, its sequences
starting at ``batch id << 32``: a micro-batch replayed after a crash (same query, same batch id)
finds its sequences committed and lands nothing twice.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass

import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, MapType, StringType, StructType

from log_store.crash import crash_point
from log_store.errors import InvalidConfigurationError, InvalidRecordError
from log_store.object_store import arrow_filesystem
from pipelines.spark.options import CHECKPOINT_LOCATION, SinkOptions

STAGING = "_lakelog_staging"
BATCH_SHIFT = 32  # a micro-batch's sequences start at batch id << BATCH_SHIFT
_ALLOWED = {"key", "value", "topic", "headers", "timestamp", "sequence"}


def check_sink_schema(schema: StructType, opts: SinkOptions) -> None:
    """The columns a write may carry (Spark's Kafka sink's, less ``partition``): ``value``; ``key``,
    ``headers``, ``timestamp``; ``topic`` unless the option names one; ``sequence`` (idempotence
    across retries of a batch write). Anything else is an error naming it, before a task runs."""
    names = {f.name for f in schema.fields}
    if "value" not in names:
        raise InvalidRecordError(f"a lakelog write needs a 'value' column; the DataFrame has {sorted(names)}")
    if "partition" in names:
        raise InvalidConfigurationError(
            "column 'partition': lakelog chooses the partition from the key (Kafka's partitioner, fenced by "
            "the partition count) so a key keeps its order across resizes; drop the column")
    if opts.topic is None and "topic" not in names:
        raise InvalidConfigurationError(
            "no topic: give .option('topic', NAME) or a 'topic' column in the DataFrame")
    extra = sorted(names - _ALLOWED)
    if extra:
        raise InvalidConfigurationError(
            f"column(s) {', '.join(repr(c) for c in extra)} are not record fields: a lakelog write takes "
            "key, value, topic, headers, timestamp (and sequence); select those")
    types = {f.name: f.dataType for f in schema.fields}
    if "headers" in types and not _headers_type_ok(types["headers"]):
        raise InvalidConfigurationError(
            f"column 'headers' is {types['headers'].simpleString()}: give array<struct<key: string, value: binary>> "
            "as Spark's Kafka sink takes, or map<string, binary>")


def _headers_type_ok(t) -> bool:
    if isinstance(t, MapType):
        return isinstance(t.keyType, StringType) and isinstance(t.valueType, (BinaryType, StringType))
    if isinstance(t, ArrayType) and isinstance(t.elementType, StructType):
        fields = {f.name: f.dataType for f in t.elementType.fields}
        return set(fields) == {"key", "value"} and isinstance(fields["key"], StringType)
    return False


@dataclass
class Staged(WriterCommitMessage):
    """What one task staged: a Parquet file and its row count."""

    path: str | None
    rows: int


def stage(directory: str, batches, storage: dict[str, str] | None = None) -> Staged:
    """Write a task's Arrow batches to one Parquet file under ``directory`` (a local folder or an
    S3 URI; ``storage``: the root's delta-rs storage options). The message names the file as
    Spark reads it (the URI under an S3 root)."""
    rows, writer, path = 0, None, None
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if writer is None:
            name = f"part-{uuid.uuid4().hex}.parquet"
            fs, folder = arrow_filesystem(directory, storage)
            fs.create_dir(folder, recursive=True)
            path = f"{directory.rstrip('/')}/{name}"
            writer = pq.ParquetWriter(f"{folder}/{name}", batch.schema, filesystem=fs)
        writer.write_batch(batch)
        rows += batch.num_rows
    if writer is not None:
        writer.close()
    return Staged(path, rows)


def stream_producer_id(opts: SinkOptions, options: dict) -> str:
    """A stream's producer id: the ``producerId`` option, else one derived from the query's
    checkpoint location (so a restarted query is the same producer)."""
    if opts.producer_id:
        return opts.producer_id
    checkpoint = next((v for k, v in options.items() if k.lower() == CHECKPOINT_LOCATION.lower()), None)
    if not checkpoint:
        raise InvalidConfigurationError(
            "a lakelog stream sink needs a producer id to land a replayed micro-batch once: give "
            ".option('checkpointLocation', PATH) on the writer, or .option('producerId', NAME)")
    return "stream-" + hashlib.sha256(str(checkpoint).encode()).hexdigest()[:16]


class Committer:
    """Produces staged files on the driver, through a session attached to its JVM."""

    def __init__(self, gateway: str | None, root: str, opts: SinkOptions, staging: str,
                 storage: dict[str, str] | None = None) -> None:
        if not gateway:
            raise InvalidConfigurationError(
                "format('lakelog') writes need a PySpark driver with a py4j gateway (not Spark Connect): "
                "register the source from the driver with pipelines.spark.source.register(spark)")
        self.gateway, self.root, self.opts, self.staging, self.storage = gateway, root, opts, staging, storage
        self.staging_is_own = True  # a batch write's directory is its own; a stream's is kept between batches

    def produce(self, messages, producer_id: str | None, batch_id: int | None = None) -> None:
        from pyspark.sql import functions as F

        from log_store.session import attach
        from pipelines.producer import Producer
        from pipelines.settings import ProducerSettings

        files = [m.path for m in messages if m is not None and m.path]
        try:
            if not files:
                return
            spark = attach(self.gateway)
            df = spark.read.parquet(*files)
            if "headers" in df.columns and isinstance(df.schema["headers"].dataType, ArrayType):
                df = df.withColumn("headers", F.map_from_entries("headers"))
            topics = [self.opts.topic] if self.opts.topic else sorted(
                r["topic"] for r in df.select("topic").distinct().collect())
            if None in topics:
                raise InvalidRecordError("some rows have no topic (a null 'topic' column); nothing was written")
            for topic in topics:
                rows = df if self.opts.topic else df.where(F.col("topic") == topic)
                rows = rows.drop("topic")
                if batch_id is None:
                    Producer(spark, self.root, topic, producer_id).send(rows)
                    continue
                # One append per micro-batch and topic, so it lands whole or not at all.
                producer = Producer(spark, self.root, topic, producer_id, ProducerSettings(batch_size=2**31 - 1))
                first = batch_id << BATCH_SHIFT
                if producer.next_sequence() > first:
                    continue  # this micro-batch landed before a crash: its replay lands nothing
                producer.send(rows.drop("sequence") if "sequence" in rows.columns else rows, sequence_start=first)
            crash_point("spark_sink:after_produce")
        finally:
            self.discard(messages)

    def discard(self, messages) -> None:
        """Remove what the tasks staged (after the produce, or when the write is aborted)."""
        fs, folder = arrow_filesystem(self.staging, self.storage)
        for m in messages:
            if m is not None and m.path:
                try:
                    fs.delete_file(arrow_filesystem(m.path, self.storage)[1])
                except FileNotFoundError:
                    pass
        if self.staging_is_own:
            try:
                fs.delete_dir(folder)
            except FileNotFoundError:
                pass


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, committer: Committer) -> None:
        self.committer = committer

    def write(self, iterator) -> Staged:
        return stage(self.committer.staging, iterator, self.committer.storage)

    def commit(self, messages) -> None:
        self.committer.produce(messages, self.committer.opts.producer_id)

    def abort(self, messages) -> None:
        self.committer.discard(messages)


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, committer: Committer, producer_id: str) -> None:
        committer.staging_is_own = False
        self.committer, self.producer_id = committer, producer_id

    def write(self, iterator) -> Staged:
        return stage(self.committer.staging, iterator, self.committer.storage)

    def commit(self, messages, batchId: int) -> None:
        self.committer.produce(messages, self.producer_id, batchId)

    def abort(self, messages, batchId: int) -> None:
        self.committer.discard(messages)


def staging_dir(root: str) -> str:
    """Where one write's (or one stream run's) tasks stage their rows."""
    return f"{root.rstrip('/')}/{STAGING}/{uuid.uuid4().hex}"
