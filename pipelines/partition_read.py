"""One partition read without a group (Kafka's console consumer with ``--partition --offset``):
``lakelog consume --partition``."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import SparkSession

from control_plane.replication.operations import Replication
from control_plane.topics import TopicAdmin
from log_store.errors import InvalidConfigurationError
from log_store.topic_log import RECORD_SCHEMA
from log_store.txn_reads import READ_COMMITTED
from pipelines.batch_reads import BatchReads
from pipelines.settings import ConsumerSettings
from pipelines.waits import LostRootWait


def read_partition(spark: SparkSession, root: str, topic: str, partition: int, offset: str | int,
                   max_records: int | None = None, settings: ConsumerSettings | None = None) -> pa.Table:
    """``partition_chunks`` as one table."""
    return pa.concat_tables(list(partition_chunks(spark, root, topic, partition, offset, max_records, settings)))


def partition_chunks(spark: SparkSession, root: str, topic: str, partition: int, offset: str | int,
                     max_records: int | None = None, settings: ConsumerSettings | None = None) -> Iterator[pa.Table]:
    """One partition's records from ``offset`` (a number, ``earliest`` or ``latest``) to its log end,
    at most ``max_records``, without a group (Kafka's console consumer with --partition --offset).
    Nothing is committed and no gate applies: order across partitions is not asked for. A replicated
    topic is read at its leader, below its high watermark. A lost leader root is waited for, up to
    ``settings.leader_wait_timeout_ms`` (``pipelines.waits``). Under read_committed
    (``settings.isolation_level``) the read ends at the last stable offset and leaves aborted
    transactions' records out; no isolation level delivers a marker (``log_store.txn_reads``).
    Read into this process as a consumer's batch is (``BatchReads``): by delta-rs on a local or S3
    root, with no JVM; elsewhere by Spark; one table of at most ``settings.max_records_per_batch``
    offsets at a time, all at the version first looked at, so a long partition is never held whole.
    At least one table, empty when there is nothing to read."""
    settings = settings or ConsumerSettings()
    admin = TopicAdmin(spark, root)
    admin.get(topic)  # UnknownTopicError first

    def snapshot():
        if admin.replica_state(topic) is not None:
            log, snap, _ends, _unread = Replication(spark, root).leader_below_high_watermark(topic)
            return log, snap
        log = admin.log(topic)
        return log, log.snapshot()

    wait = LostRootWait(topic, settings.leader_wait_timeout_ms,
                        "consumer.leader_wait_timeout_ms",
                        lambda: admin.replica_state(topic))
    log, snap = wait.run(snapshot)
    snap.metadata.check_not_deleted()
    readable = snap.readable()
    if partition not in readable:
        raise InvalidConfigurationError(f"partition {partition} is not a readable partition of '{topic}' "
                                        f"(readable: {readable}); `lakelog topics describe --topic {topic}` lists them")
    committed = settings.isolation_level == READ_COMMITTED
    start, end = snap.first_offset(partition), snap.stable_end(partition) if committed else snap.log_ends[partition]
    if offset in ("earliest", "latest"):
        first = start if offset == "earliest" else end
    else:
        try:
            first = int(offset)
        except (TypeError, ValueError):
            first = -1
        if first < 0:
            raise InvalidConfigurationError(f"--offset takes a number >= 0, earliest or latest (got {offset!r})")
        first = max(first, start)
    last = end if max_records is None else min(end, first + max_records)
    if max_records is not None and snap.dense_from(partition) > first:  # key compaction's gaps: count records
        last = log.end_after_records(partition, first, end, max_records, snap.version)
    reads, columns, step = BatchReads(spark, committed), RECORD_SCHEMA.fieldNames(), settings.max_records_per_batch
    at = first
    while True:
        upto = min(max(first, last), at + step)
        yield reads.records(log, {partition: (at, upto)}, snap, columns)
        at = upto
        if at >= last:
            return
