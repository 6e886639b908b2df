"""The producer: DataFrames or files to a topic, partitioned exactly as Kafka would.

Each batch is one fenced append (one Delta commit across all its partitions). A rejection for
stale metadata makes the producer refresh the partition count, re-partition the batch and retry;
with a producer id, a retried batch lands exactly once (the log store drops committed sequences).
"""

from __future__ import annotations

import time
import uuid

import pyarrow as pa
from typing import Callable

from pydantic import BaseModel
from pyspark.sql import Column, DataFrame, Observation, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, BinaryType, DataType, LongType, MapType, StringType, StructField, StructType

from control_plane.settings import ReplicationSettings
from control_plane.topics import TopicAdmin
from pipelines.driver_batches import is_plain, normalized, partitioned, spark_is_plain
from pipelines.placed_send import PlacedRows, placeable
from pipelines.settings import ProducerSettings
from pipelines.waits import LostRootWait
from log_store.headers import HEADERS_TYPE, headers_as
from log_store.errors import (
    LOST_ROOT, NO_SEQUENCE, NO_SEQUENCE_MARK, FencedLeaderEpochError, InputChangedError, InvalidPartitionMetadataError,
    InvalidRecordError, NotEnoughReplicasError, StaleProducerSequenceError, StorageError, leader_unavailable,
    null_values_refused,
)
from log_store.log_append import AppendResult
from log_store.log_metadata import Mode
from log_store.numbering import place_rows
from log_store.placed_offsets import Placement
from log_store.partitioner import partition_column
from log_store.dense_offsets import ONE_TASK_ROWS
from log_store.frames import cached_rows, observed, row_bound
from log_store.names import producer_app_id
from log_store.topic_log import PRODUCER_COLUMNS, TopicLog

ProgressFn = Callable[[int, int], None]


class ProduceResult(BaseModel):
    topic: str
    producer_id: str
    records: int
    appended: int
    duplicates: int
    batches: int
    metadata_refreshes: int
    commit_retries: int
    per_partition: dict[int, int]
    seconds: float


def _as_binary(types: dict[str, DataType], name: str) -> Column:
    """Column ``name`` as binary: bytes as they are, strings as UTF-8, other values as text
    (a value that is a struct, map or array as its JSON, a number as Spark writes it as text);
    null if the column is absent."""
    if name not in types:
        return F.lit(None).cast("binary").alias(name)
    kind = types[name]
    if isinstance(kind, BinaryType):
        return F.col(name)
    if isinstance(kind, StringType):
        return F.col(name).cast("binary").alias(name)
    nested = isinstance(kind, (StructType, MapType, ArrayType))
    text = F.to_json(F.col(name)) if name == "value" and nested else F.col(name).cast("string")
    return text.cast("binary").alias(name)


class Producer:
    """Produces to one topic. ``producer_id`` names an input stream: sequences are positions in it."""

    def __init__(
        self,
        spark: SparkSession,
        root: str,
        topic: str,
        producer_id: str | None = None,
        settings: ProducerSettings | None = None,
        replication: ReplicationSettings | None = None,
    ) -> None:
        """``replication``: how an ``acks: all`` producer treats an in-sync follower whose copies
        fail (``max_lag_seconds``; the configuration's ``replication`` section)."""
        self.spark = spark
        self.replication_settings = replication
        self.admin = TopicAdmin(spark, root)
        self.topic = topic
        # UnknownTopicError before anything is read; the log itself is opened by each append (a
        # replicated topic's leader root may be lost for a while: the append backs off and follows)
        self.log = TopicLog(spark, self.admin.get(topic).location)
        self.producer_id = producer_id or f"producer-{uuid.uuid4()}"
        self.settings = settings or ProducerSettings()
        # The partition count batches are partitioned for, kept between sends as Kafka's producer
        # keeps its metadata: every append checks it in its transaction, and a stale one is
        # refreshed on the append's rejection (``_send_batch``).
        self._partition_count: int | None = None
        # This producer id's highest committed sequence as of this object's last append, so the
        # next stream without sequences continues after it without reading the log first (a
        # read lists the Delta log folder: BENCHMARKS.md, soak). The append checks it in its
        # transaction; another process producing under the same id makes it read again.
        self._mark: int | None = None
        # Set by a transaction (pipelines/transactions.py): called with each batch's partitioned rows
        # before their append, it adds their partitions to the transaction and gives {producer id: epoch}.
        self.in_transaction: Callable[[str, pa.Table], dict[str, int]] | None = None
        self._transactional_ids: dict = {}  # transactional id -> pipelines.transactions.TransactionalId
        self._replicas = None  # the topic's Replication under acks: all (False: not replicated)
        self._is_replicated: bool | None = None

    def transaction(self, transactional_id: str, timeout_ms: int = 60_000):
        """A transaction of ``transactional_id`` (pipelines/transactions.py): ``with
        producer.transaction(transactional_id=...) as txn`` sends to any topics and a group's
        positions, committed on exit, aborted on an exception; ProducerFencedError for a zombie."""
        from pipelines.transactions import TransactionalId

        if transactional_id not in self._transactional_ids:
            self._transactional_ids[transactional_id] = TransactionalId(self, transactional_id, timeout_ms)
        return self._transactional_ids[transactional_id].begin()

    def next_sequence(self) -> int:
        """One past the highest sequence this producer id has committed (waiting for a lost root)."""
        wait = self._lost_root_wait()

        def read() -> int:
            if wait.waiting:
                self._follow_topic()  # an election may have moved the topic meanwhile
            return self.log.app_versions().get(producer_app_id(self.producer_id), -1) + 1

        return wait.run(read)

    def normalize(self, records: DataFrame, sequence_start: int = 0) -> DataFrame:
        """Columns key/value as binary, headers, timestamp, sequence, and an explicit ``partition``
        where given (null: the key's); value must be present."""
        types = {f.name: f.dataType for f in records.schema.fields}  # one schema fetch, one projection
        if "value" not in types:
            raise InvalidRecordError(f"records need a 'value' column; found {list(types)}")
        # A record without a timestamp gets the produce's time, as Kafka's producer stamps one
        # sent without (CreateTime): lookups by time (``offset_for_timestamp``) need one.
        now = F.current_timestamp()
        timestamp = F.coalesce(F.col("timestamp").cast("timestamp"), now) if "timestamp" in types else now
        sequence = (F.col("sequence") if "sequence" in types
                    else F.row_number().over(Window.orderBy(F.monotonically_increasing_id())) - 1)
        return records.select(
            _as_binary(types, "key"), _as_binary(types, "value"),
            headers_as("headers", types.get("headers"), HEADERS_TYPE),
            timestamp.cast("timestamp").alias("timestamp"),
            (sequence + F.lit(sequence_start)).cast("long").alias("sequence"),
            *([F.col("partition").cast("int").alias("partition")] if "partition" in types else []),
        )

    def send(
        self,
        records: DataFrame | pa.Table,
        sequence_start: int | None = None,
        on_progress: ProgressFn | None = None,
        rows: int | None = None,
        after_mark: bool = False,
        stamps: dict[str, int] | None = None,
    ) -> ProduceResult:
        """Produce every record of ``records``; returns counts, retries and timing.

        Records with a ``sequence`` column keep it (plus ``sequence_start``): re-sending them
        under the same producer id lands nothing twice (a null one is refused, nothing written).
        Records without one (and no ``sequence_start``), or any with ``after_mark``, are numbered after this producer id's
        committed mark (from ``sequence_start`` at least; with ``after_mark`` the ``sequence``
        column is each record's place in this send): the commit checks the mark it was numbered
        after, and when another process committed under the id meanwhile, the records are
        numbered again after its records rather than dropped as their duplicates. ``rows``: how
        many records there are, where the caller knows (a write's tasks counted them), so they
        are not counted again; ``records`` must then read the same rows each time (files, not a
        live source). ``stamps``: application versions committed with the records.
        """
        started = time.perf_counter()
        columns = records.column_names if isinstance(records, pa.Table) else records.columns
        after_mark = after_mark or ("sequence" not in columns and sequence_start is None)
        if isinstance(records, pa.Table):  # rows read in the driver (``inputs.read_local_input``)
            records = self._driver_batch(records)
        else:
            records = self._local_if_small(records, rows)
        if not after_mark:
            result = self._send(records, sequence_start or 0, None, on_progress, rows, stamps)
            return result.model_copy(update={"seconds": time.perf_counter() - started})
        for attempt in range(self.settings.max_retries + 1):
            mark = self._mark if self._mark is not None else self.next_sequence() - 1
            try:
                result = self._send(records, max(sequence_start or 0, mark + 1), mark, on_progress, rows, stamps)
                break
            except StaleProducerSequenceError:
                self._mark = None  # another process produced under this id: number after its records
                if attempt == self.settings.max_retries:
                    raise
        return result.model_copy(update={"seconds": time.perf_counter() - started})

    def _driver_batch(self, rows: pa.Table) -> DataFrame | pa.Table:
        """Rows already in the driver: produced from there (no JVM) when ``driver_batches.is_plain``
        and one batch, else as a Spark frame through the Spark path."""
        if "sequence" not in rows.column_names:  # each row's place, as the rows came
            rows = rows.append_column("sequence", pa.array(range(rows.num_rows), pa.int64()))
        if is_plain(rows.schema) and rows.num_rows <= self.settings.batch_size:
            return rows
        return self.spark.createDataFrame(rows)

    def _local_if_small(self, records: DataFrame, rows: int | None) -> DataFrame | pa.Table:
        """``records`` in the driver when they turn out to be few, whatever their origin (local
        rows, a filter of a cached frame, a file): one job brings at most ``ONE_TASK_ROWS`` + 1
        of them there. Up to ``ONE_TASK_ROWS`` of plain columns (``driver_batches.is_plain``),
        the produce goes on from those Arrow rows with no Spark job; others as local rows, taking
        the small batch's path (numbered in one task, written from the driver). More, and the
        rows are read again by the bulk path, as are rows known to be more."""
        known = rows if rows is not None else row_bound(records)
        if known is None:
            known = cached_rows(records)
        if known is not None and (known > ONE_TASK_ROWS or not spark_is_plain(records.schema)):
            return records
        try:
            found = records.limit(ONE_TASK_ROWS + 1).toArrow()
        except Exception:  # a type Arrow does not carry: the bulk path reads them as they are
            return records
        if found.num_rows > ONE_TASK_ROWS:
            return records
        fields = list(records.schema.fields)
        if "sequence" not in found.column_names:  # each row's place, as the rows came
            found = found.append_column("sequence", pa.array(range(found.num_rows), pa.int64()))
            fields.append(StructField("sequence", LongType(), True))
        if is_plain(found.schema) and found.num_rows <= self.settings.batch_size:
            return found
        return records if known is not None else self.spark.createDataFrame(found, StructType(fields))

    def _send(self, records: DataFrame | pa.Table, sequence_start: int, expected_mark: int | None,
              on_progress: ProgressFn | None, rows: int | None = None,
              stamps: dict[str, int] | None = None) -> ProduceResult:
        if isinstance(records, pa.Table):  # a small batch in the driver: numbered and written there
            batch = normalized(records, sequence_start, self.producer_id)
            result = self._send_batch(batch, self._nothing_sent(batch.num_rows, 1), rows=batch.num_rows,
                                      expected_mark=expected_mark, stamps=stamps)
            if on_progress:
                on_progress(1, 1)
            return result.model_copy(update={"duplicates": batch.num_rows - result.appended,
                                             "batches": 1 if batch.num_rows else 0})
        changed = False
        if "sequence" not in records.columns:
            try:
                result = self._send_placed(records, sequence_start, expected_mark, stamps, rows)
                if result is not None:
                    if on_progress:
                        on_progress(1, 1)
                    return result
            except InputChangedError:
                changed = True  # the input is not the same each time it is read: cache it, as below
        df = self.normalize(records, sequence_start)
        bound = rows if rows is not None else row_bound(df)
        if bound is None:
            bound = cached_rows(records)  # a filled cache: Spark counted its rows as it filled it
        if not changed and bound is not None and bound <= self.settings.batch_size:
            result = self._send_one(df, bound, expected_mark, stamps)
            if on_progress:
                on_progress(1, 1)
        else:
            placed = None
            if "sequence" not in records.columns:  # each row's place, counted per Spark task
                records, placed = place_rows(records)
                df = self.normalize(records, sequence_start)
            # Cache the normalized rows (counted, then written, maybe retried) unless they are only
            # a projection of rows already cached: then caching them again is a full copy.
            reuse = placed is not None or (records.is_cached and "sequence" in records.columns)
            if not reuse:
                df = df.persist()
            try:
                result = self._send_batches(df, on_progress, expected_mark, stamps)
            finally:
                if not reuse:
                    df.unpersist()
                if placed is not None:
                    placed.unpersist()
        return result

    def _send_placed(self, records: DataFrame, sequence_start: int, expected_mark: int | None,
                     stamps: dict[str, int] | None, rows: int | None) -> ProduceResult | None:
        """Rows without sequences, more than a small batch, in one append of two passes and no cache
        (pipelines/placed_send.py): one counts each Spark task's rows per partition (and records
        with a null value: a log of an earlier release refuses them, nothing written), the other
        writes the log's files with offsets known. None (nothing done) for rows too few, or more
        than one batch, for this path."""
        bound = rows if rows is not None else row_bound(records)
        if bound is None:
            bound = cached_rows(records)
        if bound is not None and bound <= ONE_TASK_ROWS or not placeable(self.spark, records):
            return None
        try:
            count = self._partition_count or self.log.metadata().undeleted_partition_count
        except LOST_ROOT:
            return None  # the batch path waits for the log
        placed = PlacedRows(self.spark, records, self.normalize)
        first = placed.counts(count)
        self._check_null_values(first.null_values)
        total = first.total
        if not 0 < total <= self.settings.batch_size or not first.placement(sequence_start).fits:
            return None
        self._partition_count = count
        result = self._send_batch(placed.sequenced(sequence_start), self._nothing_sent(total, 1), rows=total,
                                  expected_mark=expected_mark, stamps=stamps,
                                  placement=lambda n: placed.counts(n).placement(sequence_start))
        return result.model_copy(update={"duplicates": total - result.appended})

    def _check_null_values(self, count: int) -> None:
        """Refuse ``count`` records with a null value, before any batch commits, when the topic's
        log cannot keep them (made by an earlier release: ``TopicLog.keeps_null_values``)."""
        if count and not self.log.keeps_null_values():
            raise null_values_refused(self.topic, self.log.path)

    def _nothing_sent(self, records: int, batches: int) -> ProduceResult:
        """The result before the first batch: the counts each batch then adds to."""
        return ProduceResult(
            topic=self.topic, producer_id=self.producer_id, records=records, appended=0, duplicates=0,
            batches=batches, metadata_refreshes=0, commit_retries=0, per_partition={}, seconds=0.0,
        )

    def _send_batches(self, df: DataFrame, on_progress: ProgressFn | None,
                      expected_mark: int | None = None, stamps: dict[str, int] | None = None) -> ProduceResult:
        """Rows of unknown count: counted in one pass of their own (which also fills the cache)
        before any batch is committed, so a null value the log cannot keep (``_check_null_values``)
        fails the whole produce, not the batch it is in; then sent in batches of ``batch_size`` by
        sequence. With
        ``expected_mark`` (records numbered after the mark) every batch checks the mark the
        previous one left; a batch that finds another process's records after it shifts its own
        and the later batches' sequences past them (a first batch's is the caller's to renumber)."""
        metrics = [F.count(F.lit(1)).alias("n"), F.min("sequence").alias("lo"),
                   F.sum(F.col("value").isNull().cast("int")).alias("null_values"),
                   F.sum(F.col("sequence").isNull().cast("int")).alias("null_sequences")]
        counted = Observation()
        df.observe(counted, *metrics).write.format("noop").mode("overwrite").save()
        stats = observed(counted, lambda: df.agg(*metrics).first().asDict())
        self._check_null_values(stats["null_values"])
        if stats["null_sequences"]:  # (a batch is chosen by sequence: such a record would be in none)
            raise InvalidRecordError(f"{stats['null_sequences']} {NO_SEQUENCE}")
        total = int(stats["n"])
        size = self.settings.batch_size
        n_batches = (total + size - 1) // size
        result = self._nothing_sent(total, n_batches)
        if n_batches > 1:
            df = df.withColumn("_batch", F.floor((F.col("sequence") - F.lit(stats["lo"])) / size))
        shift = 0
        for b in range(n_batches):
            batch = df.where(F.col("_batch") == b).drop("_batch") if n_batches > 1 else df
            for attempt in range(self.settings.max_retries + 1):
                moved = batch.withColumn("sequence", F.col("sequence") + F.lit(shift)) if shift else batch
                try:
                    result = self._send_batch(moved, result, rows=min(size, total - b * size),
                                              expected_mark=expected_mark, stamps=stamps)
                    break
                except StaleProducerSequenceError:
                    if b == 0 or attempt == self.settings.max_retries:
                        raise
                    mark = self.next_sequence() - 1
                    shift, expected_mark = shift + mark - expected_mark, mark
            if expected_mark is not None:
                expected_mark = self._mark
            if on_progress:
                on_progress(b + 1, n_batches)
        return result.model_copy(update={"duplicates": total - result.appended})

    def _send_one(self, df: DataFrame, bound: int, expected_mark: int | None = None,
                  stamps: dict[str, int] | None = None) -> ProduceResult:
        """Rows known to fit one batch (at most ``bound``, from the plan or a filled cache):
        counted as they are written, with no pass of their own. A null value for a log of an
        earlier release fails the write (its value column is NOT NULL), so nothing is committed.
        Not cached (a cached input adds a Spark job): a plan with a row bound reads local rows, a range or a limit,
        and a retried append reads them (or the caller's cache) again; only a committed
        attempt's rows land, and sequences dedupe them."""
        counted = Observation()
        # a null sequence fails the write (the append's floor, ``sequence > mark``, would drop the record)
        sequence = F.coalesce(F.col("sequence"), F.raise_error(F.lit(f"{NO_SEQUENCE_MARK}: a record's sequence is null"))
                              .cast("long"))
        rows = df.withColumn("sequence", sequence).observe(counted, F.count(F.lit(1)).alias("n"))
        result = self._send_batch(rows, self._nothing_sent(0, 1), rows=bound, expected_mark=expected_mark,
                                  stamps=stamps)
        # The write ran (a failed one raised), so the count is in; counted again if it got lost.
        total = int(observed(counted, lambda: {"n": df.count()})["n"])
        return result.model_copy(update={"records": total, "duplicates": total - result.appended,
                                         "batches": 1 if total else 0})

    def _check_explicit_partitions(self, batch: DataFrame) -> None:
        """After an append refused on the partition metadata: the partitions rows name themselves
        must be writable under the topic's count now (they are not re-partitioned), or the produce
        fails naming them, nothing written; else the append is tried again with the new count."""
        meta = self.log.metadata()
        named = sorted(r[0] for r in batch.where(F.col("partition").isNotNull()).select("partition").distinct().collect())
        bad = {p: ("does not exist" if p not in meta.partitions else f"is {meta.partitions[p].mode.value}")
               for p in named if p not in meta.partitions or meta.partitions[p].mode is not Mode.READ_WRITE
               or p >= meta.undeleted_partition_count}
        if bad:
            raise InvalidRecordError(
                f"records name partition(s) of '{self.topic}' that cannot be written: "
                + "; ".join(f"{p} {why}" for p, why in bad.items())
                + f". Write to partitions 0-{meta.undeleted_partition_count - 1}, or leave 'partition' null to take the "
                "key's partition; nothing was written")

    def _follow_topic(self) -> bool:
        """Re-read where the topic's log is (its record's location; a replicated topic's moves to
        the new leader's log on an election): True if it moved."""
        location = self.admin.get(self.topic).location
        if location == self.log.path:
            return False
        # a replicated topic's new leader log may be on a root lost for now: wait for it
        self.log = (TopicLog.at_leader(self.spark, self.topic, location) if self._replicated()
                    else TopicLog.for_path(self.spark, location))
        self._mark = None
        return True

    def _replicated(self) -> bool:
        if self._is_replicated is None:
            self._is_replicated = self.admin.replica_state(self.topic) is not None
        return self._is_replicated

    def _replication(self):
        """The topic's replication when this producer waits for ``acks: all`` (None otherwise)."""
        if self.settings.acks != "all":
            return None
        if self._replicas is None:
            from control_plane.replication.operations import Replication

            replication = Replication(self.spark, self.admin.layout.root, self.replication_settings)
            self._replicas = replication if self._replicated() else False
        return self._replicas or None

    def _send_batch(self, batch: DataFrame | pa.Table, result: ProduceResult, rows: int | None = None,
                    expected_mark: int | None = None, stamps: dict[str, int] | None = None,
                    placement: Callable[[int], Placement] | None = None) -> ProduceResult:
        """One batch (about ``rows`` records) as one fenced append, re-partitioned on stale metadata.
        ``placement``: the rows' counts per Spark task and partition for a partition count (``_send_placed``)."""
        replication = self._replication()
        if replication is not None:  # acks: all refuses up front, as Kafka's leader does
            replication.check_in_sync(self.topic, self.settings.min_insync_replicas)
        wait = self._lost_root_wait()
        tries = retries = 0
        # This batch's commit, once made: its acknowledgement failing (a follower behind, the leader
        # root lost) is retried by appending again in dedupe mode, which finds the records already
        # numbered and committed (at this log, or copied to a new leader's) and writes none of them
        # twice. Numbering them after the mark once more would land them again.
        landed: AppendResult | None = None
        while True:
            refresh, tries = tries > 0, tries + 1
            if landed is not None:
                expected_mark = None
            try:
                if refresh and self._follow_topic():  # a failover moved the topic to another root's log
                    expected_mark = None
                if self._partition_count is None or refresh:
                    self._partition_count = self.log.metadata().undeleted_partition_count
                count = self._partition_count
                # acks: all is acknowledged only under the leader epoch read before the append
                epoch = replication.state(self.topic).leader_epoch if replication is not None else -1
                if isinstance(batch, pa.Table):
                    parted = partitioned(batch, count)  # in a transaction: its partitions added first
                    appended = self.log.append_rows(
                        parted, count, {self.producer_id: expected_mark},
                        max_retries=self.settings.max_retries, backoff_ms=self.settings.retry_backoff_ms, stamps=stamps,
                        transactional=self.in_transaction(self.topic, parted) if self.in_transaction else None)
                else:
                    chosen = partition_column(self.spark, "key", "sequence", count)
                    if "partition" in batch.columns:  # the row's own, as Kafka's producer takes one; else the key's
                        chosen = F.coalesce(F.col("partition"), chosen)
                    columns = {"partition": chosen, "producer_id": F.lit(self.producer_id)}
                    parted = batch.select(*(columns.get(c, F.col(c)).alias(c) for c in PRODUCER_COLUMNS))  # one projection
                    appended = self.log.append(
                        parted, count, self.producer_id,
                        max_retries=self.settings.max_retries, backoff_ms=self.settings.retry_backoff_ms, rows=rows,
                        expected_mark=expected_mark, stamps=stamps, placed=placement(count) if placement else None,
                    )
                if landed is None:
                    landed = appended
                if replication is not None:  # acknowledged once every in-sync root holds the records
                    replication.acknowledge(self.topic, self.log.path, self.settings.min_insync_replicas, epoch)
            except LOST_ROOT as exc:  # the leader root lost (or an election moving it): back off, up to the timeout
                lost = isinstance(exc, StorageError) and self._replicated()
                wait.failed(leader_unavailable(self.topic, self.log.path, exc) if lost else exc)
                result = result.model_copy(update={"metadata_refreshes": result.metadata_refreshes + 1})
                continue
            except (InvalidPartitionMetadataError, NotEnoughReplicasError) as exc:
                if isinstance(exc, InvalidPartitionMetadataError) and isinstance(batch, DataFrame) and "partition" in batch.columns:
                    self._check_explicit_partitions(batch)
                if retries == self.settings.max_retries:
                    raise
                if not isinstance(exc, InvalidPartitionMetadataError) or isinstance(exc, FencedLeaderEpochError):
                    # an election under way, or an in-sync root behind: back off
                    time.sleep(min(2.0, self.settings.retry_backoff_ms / 1000 * 2 ** min(retries, 6)))
                retries += 1
                result = result.model_copy(update={"metadata_refreshes": result.metadata_refreshes + 1})
                continue
            if appended is not landed and not appended.appended:  # a retry that found the batch committed
                marks = [m for m in (landed.producer_mark, appended.producer_mark) if m is not None]
                appended = landed.model_copy(update={"producer_mark": max(marks, default=None)})
            self._mark = appended.producer_mark
            per = dict(result.per_partition)
            for p, (lo, hi) in appended.ranges.items():
                per[p] = per.get(p, 0) + hi - lo
            return result.model_copy(update={
                "appended": result.appended + appended.appended,
                "commit_retries": result.commit_retries + appended.attempts - 1,
                "per_partition": per,
            })

    def _lost_root_wait(self) -> LostRootWait:
        """How a batch waits for a lost leader root (``pipelines.waits``): up to ``delivery_timeout_ms``."""
        return LostRootWait(self.topic, self.settings.delivery_timeout_ms, "producer.delivery_timeout_ms",
                            lambda: self.admin.replica_state(self.topic), self.settings.retry_backoff_ms)
