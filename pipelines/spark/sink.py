"""``format("lakelog")`` for ``df.write`` and ``df.writeStream``: rows produced through the fenced,
idempotent producer (``pipelines.producer.Producer``), partitioned by key as Kafka's partitioner
does (or by a row's own ``partition``), with dense offsets. The JVM sink hands this module the
DataFrame itself (a batch write's, or a micro-batch's as ``foreachBatch`` sees it): nothing is
staged, and a write lands through the same fenced append as every produce, or not at all.

Without a ``sequence`` column a row's sequence is its place in the write (the rows of Spark's
first task, in their order, then the second task's, ...), numbered after the producer's mark, so
a key's rows land in the DataFrame's order. Each topic's share is one append.

A stream's micro-batch is one append per topic under the query's producer id, numbered after the
producer's mark (from ``batch id << 32`` where that is above it), and its commit stamps which
batch it was: the batch id with the checkpoint's offsets for it. The replay of the batch that
landed last (a crash between the append and Spark's record of it) carries the same stamp and
lands nothing twice; a batch id planned again on a restored older checkpoint carries another and
lands (what landed before lands again: duplicates at worst, never loss, as with Kafka's sink).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

import pyarrow as pa

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from log_store.crash import crash_point
from log_store.files import read_file
from log_store.headers import is_headers_type
from log_store.errors import InvalidConfigurationError, InvalidRecordError, LakelogError
from log_store.names import producer_app_id, stream_batch_app_id
from pipelines.spark.options import CHECKPOINT_LOCATION, SinkOptions, parse_sink_options

BATCH_SHIFT = 32  # a micro-batch's sequences start at batch id << BATCH_SHIFT where that is above the mark
_ALLOWED = {"key", "value", "topic", "headers", "timestamp", "partition", "sequence"}


def check_sink_schema(schema: StructType, opts: SinkOptions) -> None:
    """The columns a write may carry (Spark's Kafka sink's): ``value``; ``key``, ``headers``,
    ``timestamp``, ``partition`` (an integer; null: the key's partition); ``topic`` unless the
    option names one; ``sequence`` (idempotence across retries of a batch write). Anything else is
    an error naming it, before a task runs."""
    names = {f.name for f in schema.fields}
    if "value" not in names:
        raise InvalidRecordError(f"a lakelog write needs a 'value' column; the DataFrame has {sorted(names)}")
    kinds = {f.name: f.dataType.typeName() for f in schema.fields}
    if "partition" in kinds and kinds["partition"] not in ("integer", "short", "byte", "long"):
        raise InvalidConfigurationError(
            f"column 'partition' is {kinds['partition']}: give an integer partition number (or null for the key's "
            "partition), as Spark's Kafka sink takes it")
    if opts.topic is None and "topic" not in names:
        raise InvalidConfigurationError(
            "no topic: give .option('topic', NAME) or a 'topic' column in the DataFrame")
    extra = sorted(names - _ALLOWED)
    if extra:
        raise InvalidConfigurationError(
            f"column(s) {', '.join(repr(c) for c in extra)} are not record fields: a lakelog write takes "
            "key, value, topic, headers, timestamp (and sequence); select those")
    types = {f.name: f.dataType for f in schema.fields}
    if "headers" in types and not is_headers_type(types["headers"]):
        raise InvalidConfigurationError(
            f"column 'headers' is {types['headers'].simpleString()}: give array<struct<key: string, value: binary>> "
            "as Spark's Kafka sink takes, or map<string, binary>")


def query_id(checkpoint: str, spark: SparkSession | None = None) -> str:
    """The id Spark gave the query whose checkpoint is at ``checkpoint`` (its ``metadata`` file,
    written when the query starts): the same for every run of that checkpoint, a new one for a
    new or deleted checkpoint, whatever the path's spelling (``/ck`` and ``/ck/``). ``spark``
    reads a checkpoint on a URI (through its Hadoop file systems)."""
    try:
        found = read_file(spark, f"{checkpoint.rstrip('/')}/metadata")
        if found is None:
            raise OSError("no such file")
        return str(json.loads(found.decode("utf-8").splitlines()[0])["id"])
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise InvalidConfigurationError(
            f"cannot read the query id from the stream's checkpoint {checkpoint}/metadata ({exc}): a lakelog stream "
            "sink names its producer by the query, so give the query a checkpointLocation") from exc


def checkpoint_of(options: dict) -> str | None:
    """The query's ``checkpointLocation``, as Spark hands it to the sink among its options."""
    found = next((v for k, v in options.items() if k.lower() == CHECKPOINT_LOCATION.lower()), None)
    return str(found) if found else None


def stream_checkpoint(options: dict) -> str:
    """A stream's ``checkpointLocation``, which a stream sink needs."""
    checkpoint = checkpoint_of(options)
    if not checkpoint:
        raise InvalidConfigurationError(
            "a lakelog stream sink needs the query's checkpoint to land a replayed micro-batch once: give "
            ".option('checkpointLocation', PATH) on the writer")
    return checkpoint


def stream_producer_id(opts: SinkOptions, options: dict, spark: SparkSession | None = None) -> tuple[str, str]:
    """A stream's producer id, and its query id: the query's (``query_id``), after the
    ``producerId`` option where given. A restarted query is the same producer, so a replayed
    micro-batch lands once; a query with a new or deleted checkpoint is a new producer, whose
    batch 0 is not taken for the old query's."""
    query = query_id(stream_checkpoint(options), spark)
    return f"{opts.producer_id or 'stream'}:{query}", query


def batch_stamp(checkpoint: str, batch_id: int, spark: SparkSession | None = None) -> int:
    """What identifies micro-batch ``batch_id`` of the query at ``checkpoint``: a 63-bit digest of
    the id and of Spark's offsets file for it (``offsets/<id>``, written before the batch runs and
    read again, unchanged, by its replay after a crash; a batch planned again on a restored older
    checkpoint gets a new one, with the planning time in it)."""
    # no offsets file (asynchronous progress tracking): the id alone
    planned = read_file(spark, f"{checkpoint.rstrip('/')}/offsets/{int(batch_id)}") or b""
    digest = hashlib.blake2b(str(int(batch_id)).encode() + b"\n" + planned, digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def landed_before(batch_id: int, stamp: int, versions: dict[str, int], producer_id: str) -> bool:
    """Whether micro-batch ``batch_id`` (``stamp``: ``batch_stamp``) is the one the stream's
    producer landed last, by the log's application ``versions``: then it is a replay after a
    crash and lands nothing. A log whose last stream batch carries no stamp (an earlier release
    wrote it) judges by the mark: the batch whose sequences it lies in."""
    recorded = versions.get(stream_batch_app_id(producer_id))
    if recorded is not None:
        return recorded == stamp
    mark = versions.get(producer_app_id(producer_id), -1)
    return mark >= 0 and mark >> BATCH_SHIFT == batch_id


def check_mode(mode: str) -> None:
    """Spark's save modes append and errorifexists (its default) append, as Kafka's sink does;
    overwrite and ignore are refused."""
    if mode.lower() not in ("append", "errorifexists"):
        raise InvalidConfigurationError(
            f"mode('{mode.lower()}'): a lakelog topic is a log: records are appended, never overwritten or "
            "skipped; use mode('append')")


def write(spark: SparkSession, options: dict, default_root: str | None, df: DataFrame, batch_id: int | None,
          mode: str) -> None:
    """Produce ``df`` (a batch write's rows, or micro-batch ``batch_id`` of a stream) to its
    topics (``produce``). Spark's save modes as ``check_mode`` takes them."""
    from pipelines.spark.roots import resolve_root

    check_mode(mode)
    opts = parse_sink_options(options)
    check_sink_schema(df.schema, opts)
    root = resolve_root(opts.root, default_root, writing=True)
    producer_id, checkpoint = opts.producer_id, None
    if batch_id is not None:
        checkpoint = checkpoint_of(options)
        producer_id = stream_producer_id(opts, options, spark)[0]
    topics = [opts.topic] if opts.topic else [r[0] for r in df.select("topic").distinct().collect()]
    source = df.persist() if len(topics) > 1 else df  # read once, then shared out by topic
    try:
        produce(spark, root, opts, topics,
                lambda topic: (source if opts.topic else source.where(F.col("topic") == topic)).drop("topic"),
                producer_id, batch_id, checkpoint)
    finally:
        if source is not df:
            source.unpersist()


def produce(spark, root: str, opts: SinkOptions, topics: list, rows_of: Callable[[str], "DataFrame | pa.Table"],
            producer_id: str | None, batch_id: int | None, checkpoint: str | None,
            checkpoint_spark: SparkSession | None = None) -> None:
    """Produce each topic's rows (``rows_of(topic)``, a DataFrame or an Arrow table) to it: one
    append per topic (a topic's share lands whole or not at all). A stream's micro-batch
    ``batch_id`` is numbered after the producer's mark from ``batch_id << BATCH_SHIFT`` and
    stamped (``batch_stamp``; the checkpoint read through ``checkpoint_spark``, else ``spark``),
    and lands nothing when it is the replay of the batch that landed last. A write to several
    topics that fails after some landed says which."""
    from log_store.engine import app_versions
    from pipelines.producer import Producer
    from pipelines.settings import ProducerSettings

    if None in topics:
        raise InvalidRecordError("some rows have no topic (a null 'topic' column); nothing was written")
    topics = sorted(topics)
    settings = ProducerSettings(batch_size=2**31 - 1, acks=opts.acks, min_insync_replicas=opts.min_insync_replicas)
    landed: list[str] = []
    try:
        for topic in topics:
            rows = rows_of(topic)
            columns = rows.column_names if isinstance(rows, pa.Table) else rows.columns
            producer = Producer(spark, root, topic, producer_id, settings)
            if batch_id is None:
                # the writer's own sequences: a repeated write lands once; else numbered after the mark
                producer.send(rows, after_mark="sequence" not in columns)
            else:
                stamp = batch_stamp(checkpoint, batch_id, checkpoint_spark or spark)
                if landed_before(batch_id, stamp, app_versions(spark, producer.log.path), producer.producer_id):
                    continue  # this micro-batch landed before a crash: its replay lands nothing
                producer.send(rows, batch_id << BATCH_SHIFT, after_mark=True,
                              stamps={stream_batch_app_id(producer.producer_id): stamp})
            landed.append(topic)
            crash_point("spark_sink:after_topic")
        crash_point("spark_sink:after_produce")
    except Exception as exc:
        if landed and batch_id is None:
            rest = [t for t in topics if t not in landed]
            raise LakelogError(
                f"the write landed in topic(s) {', '.join(landed)} and not in {', '.join(rest)} ({exc}); each "
                "topic's share lands whole or not at all, but topics are separate logs. Write the rest again: "
                "with a producerId and a sequence column a repeated write lands only what is missing") from exc
        raise
