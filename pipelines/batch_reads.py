"""A consumer's batch read to the driver as its isolation level delivers it, and the records a
batch holds counted (``log_store.txn_reads``): never a transaction marker; under read_committed
no aborted transaction's record (the batch's ends are already at the last stable offset:
``Consumer.snapshot``). Offsets of markers, aborted records and key compaction's removed records
are gaps: counted as the records that are there, passed by the positions."""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
from pyspark.sql import SparkSession

from log_store import rs_reader
from log_store.log_metadata import LogSnapshot
from log_store.object_store import delta_rs_reads
from log_store.topic_log import TopicLog
from log_store.txn_reads import aborted_in

Ranges = Mapping[int, tuple[int, int]]


class BatchReads:
    """Reads of one consumer's batches; ``committed``: read_committed. Remembers the aborted
    transactions found for the last ranges read and the count of the last batch it read whole."""

    def __init__(self, spark: SparkSession, committed: bool) -> None:
        self.spark = spark
        self.committed = committed
        self._aborted: tuple | None = None  # ((log path, version, ranges, dialect), predicate)
        self._counted: tuple | None = None  # (log version, ranges, records)

    def aborted(self, log: TopicLog, ranges: Ranges, snap: LogSnapshot, quote: str) -> str | None:
        """Under read_committed, the predicate of the aborted records in ``ranges`` (``txn_reads.aborted_in``)."""
        if not self.committed:
            return None
        key = (log.path, snap.version, tuple(sorted(ranges.items())), quote)
        if self._aborted is None or self._aborted[0] != key:
            self._aborted = (key, aborted_in(log, ranges, snap, quote))
        return self._aborted[1]

    def records(self, log: TopicLog, ranges: Ranges, snap: LogSnapshot, columns: list[str]) -> pa.Table:
        """``columns`` of the records of ``ranges`` at ``snap``'s version as delivered, by partition
        and offset: read with delta-rs where lakelog can (``delta_rs_reads``: a local or S3 log),
        else by Spark, brought to the driver."""
        here, storage = delta_rs_reads(self.spark, log.path)
        if not here:
            return log.read(dict(ranges), ordered=True, version=snap.version,
                            exclude=self.aborted(log, ranges, snap, "`")).select(*columns).toArrow()
        found = rs_reader.log_ranges(log.path, snap.version, ranges, columns, storage, records_only=True,
                                     exclude=self.aborted(log, ranges, snap, '"'))
        return found.sort_by([("partition", "ascending"), ("offset", "ascending")]) if "partition" in columns else found

    def batch(self, log: TopicLog, ranges: Ranges, snap: LogSnapshot, columns: list[str]) -> pa.Table:
        """``records``, counted for ``count``."""
        found = self.records(log, ranges, snap, columns)
        self._counted = (snap.version, dict(ranges), found.num_rows)
        return found

    def count(self, log: TopicLog, ranges: Ranges, snap: LogSnapshot) -> int:
        """How many records ``ranges`` of ``snap`` deliver: one per offset where offsets are dense,
        read where they may not be: below where key compaction left gaps (``LogSnapshot.dense_from``)
        and in partitions transactions wrote to (markers, and aborted records under read_committed).
        As a Kafka consumer counts the records a fetch returned. The last ``batch`` as it was read."""
        if self._counted is not None and self._counted[:2] == (snap.version, dict(ranges)):
            return self._counted[2]
        gappy, dense = {}, 0
        for p, (s, e) in ranges.items():
            if e <= s:
                continue
            if p in (snap.txn_marks or {}):
                gappy[p] = (s, e)
                continue
            if snap.dense_from(p) > s:
                gappy[p] = (s, min(snap.dense_from(p), e))
            dense += max(0, e - max(s, snap.dense_from(p)))
        if not gappy:
            return dense
        here, storage = delta_rs_reads(self.spark, log.path)
        if here:
            return dense + rs_reader.log_ranges(log.path, snap.version, gappy, ["offset"], storage, records_only=True,
                                                exclude=self.aborted(log, gappy, snap, '"')).num_rows
        return dense + log.read(dict(gappy), ordered=False, version=snap.version,
                                exclude=self.aborted(log, gappy, snap, "`")).count()
