"""``format("lakelog")`` for ``df.write`` and ``df.writeStream``: rows produced through the fenced,
idempotent producer (``pipelines.producer.Producer``), partitioned by key as Kafka's partitioner
does, with dense offsets.

Spark's tasks stage their rows as Parquet files under the root (``_lakelog_staging/``, written
with pyarrow: a local folder, or S3 with the root's endpoint and credentials); the commit, on the
driver, produces them with one Spark session attached to the driver's JVM
(``log_store.session.attach``) and removes them. So a write lands through the same fenced
append as every produce, or not at all (an aborted write leaves nothing in the log). A row's
sequence is its place in the write (its task's place, then its row in the task's file), so a
key's rows land in the DataFrame's order without a pass to number them.

A stream's micro-batch is one append per topic under the query's producer id, numbered after the
producer's mark (from ``batch id << 32`` where that is above it), and its commit stamps which
batch it was: the batch id with the checkpoint's offsets for it. The replay of the batch that
landed last (a crash between the append and Spark's record of it) carries the same stamp and
lands nothing twice; a batch id planned again on a restored older checkpoint carries another and
lands (what landed before lands again: duplicates at worst, never loss, as with Kafka's sink).
"""

from __future__ import annotations

import copy
import hashlib
import json
import uuid
from dataclasses import dataclass

import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from log_store.crash import crash_point
from log_store.headers import is_headers_type
from log_store.errors import InvalidConfigurationError, InvalidRecordError, LakelogError
from log_store.names import producer_app_id, stream_batch_app_id
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
    if "headers" in types and not is_headers_type(types["headers"]):
        raise InvalidConfigurationError(
            f"column 'headers' is {types['headers'].simpleString()}: give array<struct<key: string, value: binary>> "
            "as Spark's Kafka sink takes, or map<string, binary>")


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


def staged_position(staged: list[Staged]) -> str:
    """A SQL expression for each staged row's place in the write: the rows of the tasks before
    its own (in task order, the order of Spark's commit messages) plus its row in its task's file."""
    starts, total = [], 0
    for m in staged:
        starts.append(f"'{m.path.rsplit('/', 1)[-1]}', {total}L")
        total += m.rows
    name = "element_at(split(_metadata.file_path, '/'), -1)"
    return f"map({', '.join(starts)})[{name}] + _metadata.row_index"


def query_id(checkpoint: str, storage: dict[str, str] | None = None) -> str:
    """The id Spark gave the query whose checkpoint is at ``checkpoint`` (its ``metadata`` file,
    written when the query starts): the same for every run of that checkpoint, a new one for a
    new or deleted checkpoint, whatever the path's spelling (``/ck`` and ``/ck/``)."""
    try:
        fs, folder = arrow_filesystem(checkpoint, storage)
        with fs.open_input_stream(f"{folder.rstrip('/')}/metadata") as f:
            return str(json.loads(f.read().decode("utf-8").splitlines()[0])["id"])
    except (OSError, ValueError, KeyError, IndexError, InvalidConfigurationError) as exc:
        raise InvalidConfigurationError(
            f"cannot read the query id from the stream's checkpoint {checkpoint}/metadata ({exc}): a lakelog stream "
            "sink names its producer by the query, so give a checkpointLocation on a local or S3 path") from exc


def checkpoint_of(options: dict) -> str | None:
    """The query's ``checkpointLocation``, as Spark hands it to the sink among its options."""
    found = next((v for k, v in options.items() if k.lower() == CHECKPOINT_LOCATION.lower()), None)
    return str(found) if found else None


def stream_producer_id(opts: SinkOptions, options: dict, storage: dict[str, str] | None = None) -> tuple[str, str]:
    """A stream's producer id, and its query id: the query's (``query_id``), after the
    ``producerId`` option where given. A restarted query is the same producer, so a replayed
    micro-batch lands once; a query with a new or deleted checkpoint is a new producer, whose
    batch 0 is not taken for the old query's."""
    checkpoint = checkpoint_of(options)
    if not checkpoint:
        raise InvalidConfigurationError(
            "a lakelog stream sink needs the query's checkpoint to land a replayed micro-batch once: give "
            ".option('checkpointLocation', PATH) on the writer")
    query = query_id(checkpoint, storage)
    return f"{opts.producer_id or 'stream'}:{query}", query


def batch_stamp(checkpoint: str, batch_id: int, storage: dict[str, str] | None = None) -> int:
    """What identifies micro-batch ``batch_id`` of the query at ``checkpoint``: a 63-bit digest of
    the id and of Spark's offsets file for it (``offsets/<id>``, written before the batch runs and
    read again, unchanged, by its replay after a crash; a batch planned again on a restored older
    checkpoint gets a new one, with the planning time in it)."""
    try:
        fs, folder = arrow_filesystem(checkpoint, storage)
        with fs.open_input_stream(f"{folder.rstrip('/')}/offsets/{int(batch_id)}") as f:
            planned = f.read()
    except (OSError, InvalidConfigurationError):
        planned = b""  # no offsets file (asynchronous progress tracking): the id alone
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


class Committer:
    """Produces staged files on the driver, through a session attached to its JVM."""

    def __init__(self, gateway: str | None, root: str, opts: SinkOptions, staging: str,
                 storage: dict[str, str] | None = None) -> None:
        if not gateway:
            raise InvalidConfigurationError(
                "format('lakelog') writes need a PySpark driver with a py4j gateway (not Spark Connect): "
                "register the source from the driver with pipelines.spark.register(spark)")
        self.gateway, self.root, self.opts, self.staging, self.storage = gateway, root, opts, staging, storage

    def produce(self, messages, producer_id: str | None, batch_id: int | None = None,
                checkpoint: str | None = None) -> None:
        """Produce what the tasks staged: one append per topic (a topic's share lands whole or not
        at all), numbered after the producer's mark. A stream's micro-batch ``batch_id`` (of the
        query at ``checkpoint``) numbers its records from ``batch_id << 32`` where that is above
        the mark, stamps the commit with the batch, and lands nothing when it is the batch that
        landed last (a replay after a crash). A write to several topics that fails after some
        landed says which."""
        from pyspark.sql import functions as F

        from log_store.engine import app_versions
        from log_store.session import attach
        from pipelines.producer import Producer
        from pipelines.settings import ProducerSettings

        staged = [m for m in messages if m is not None and m.path]
        landed: list[str] = []
        try:
            if not staged:
                return
            spark = attach(self.gateway)
            df = spark.read.parquet(*(m.path for m in staged))
            # Each row's place in the write, from its task's place and its row in the task's file:
            # the sequence it is produced with, with no pass over the rows to number them.
            position = F.expr(staged_position(staged))
            topics = [self.opts.topic] if self.opts.topic else sorted(
                r["topic"] for r in df.select("topic").distinct().collect())
            if None in topics:
                raise InvalidRecordError("some rows have no topic (a null 'topic' column); nothing was written")
            count = sum(m.rows for m in staged) if self.opts.topic else None  # a topic's share is not counted
            for topic in topics:
                rows = df if self.opts.topic else df.where(F.col("topic") == topic)
                rows = rows.drop("topic")
                producer = Producer(spark, self.root, topic, producer_id, ProducerSettings(batch_size=2**31 - 1))
                if batch_id is None:
                    if "sequence" in rows.columns:  # the writer's own: a repeated write lands once
                        producer.send(rows, rows=count)
                    else:
                        producer.send(rows.withColumn("sequence", position), rows=count, after_mark=True)
                else:
                    stamp = batch_stamp(checkpoint, batch_id, self.storage)
                    if landed_before(batch_id, stamp, app_versions(spark, producer.log.path), producer_id):
                        continue  # this micro-batch landed before a crash: its replay lands nothing
                    producer.send(rows.withColumn("sequence", position), batch_id << BATCH_SHIFT, rows=count,
                                  after_mark=True, stamps={stream_batch_app_id(producer_id): stamp})
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
        finally:
            self.discard()

    def discard(self) -> None:
        """Remove what the tasks staged: the whole staging folder, after the produce or when the
        write is aborted (every task of the write or micro-batch has ended; files of failed task
        attempts go too). A stream's next batch makes it again."""
        fs, folder = arrow_filesystem(self.staging, self.storage)
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
        self.committer.discard()


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, committer: Committer, producer_id: str, checkpoint: str) -> None:
        self.committer, self.producer_id, self.checkpoint = committer, producer_id, checkpoint

    def __getstate__(self) -> dict:
        """What Spark sends to the tasks that stage rows: no py4j secret (a stream's commits run in
        a runner that builds its own writer from the data source). A batch write's writer keeps it:
        Spark sends the same pickled writer to its commit."""
        committer = copy.copy(self.committer)
        committer.gateway = None
        return {**self.__dict__, "committer": committer}

    def write(self, iterator) -> Staged:
        return stage(self.committer.staging, iterator, self.committer.storage)

    def commit(self, messages, batchId: int) -> None:
        self.committer.produce(messages, self.producer_id, batchId, self.checkpoint)

    def abort(self, messages, batchId: int) -> None:
        self.committer.discard()


def staging_dir(root: str, query: str | None = None) -> str:
    """Where one write's tasks stage their rows; a stream's (``query``: its query id) keep one
    folder for the query's life, so a run after a crash clears what the crashed one left."""
    return f"{root.rstrip('/')}/{STAGING}/{f'stream-{query}' if query else uuid.uuid4().hex}"
