"""A Kafka consumer group member's Delta sink, written exactly once with delta-rs.

What a member of a schedule's Kafka group (``chaos.kafka_actors``) delivers goes to a Delta table
laid out as lakelog's own sinks are (the topic, then the log record's columns; the change feed on;
each commit's metadata naming its group: ``log_store.names.sink_commit_metadata``), so the checker
judges it by the same rules. Kafka's classic groups deliver at least once (a partition moved before
its commit is read again from the committed offset), so the sink keeps its own positions, one Delta
application transaction per partition (``log_store.names.sink_app_id``) committed with the records,
as lakelog's members do, and takes only the records at or past them: a record below its partition's
position is in the sink already (the partition's offsets are never reused: a number grown back over
a retired one goes on from the old end). A commit is made only on the version its positions were
read at (no retry on a newer version): when another member committed meanwhile (a zombie woken
after its partitions moved, a member killed between its sink commit and its offset commit), the
positions are read again and the records filtered again.

The rows' ``producer_id`` and ``sequence`` are those the record's value names (``kp:17``: producer
``kp``, sequence 17), which is what a Kafka consumer can see of them and what the checker judges a
record written through `lakelog serve` by (``chaos.checker_reads.as_sent``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timezone

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError

from log_store.names import sink_app_id, sink_commit_metadata

SINK_SCHEMA = pa.schema([
    ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("leader_epoch", pa.int32()),
    ("key", pa.binary()), ("value", pa.binary()), ("timestamp", pa.timestamp("us", tz="UTC")),
    ("producer_id", pa.string()), ("sequence", pa.int64()),
])
ATTEMPTS = 50


@dataclass(frozen=True)
class Delivered:
    """One record a Kafka consumer returned."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp_ms: int | None = None
    leader_epoch: int | None = None


def named_by_value(value: bytes | None) -> tuple[str | None, int | None]:
    """The producer and sequence a campaign record's value names (``kp:17``), or (None, None) (also
    for a tombstone: the checker names it by the log record at its offset)."""
    if value is None:
        return None, None
    name, sep, seq = bytes(value).decode("utf-8", "replace").rpartition(":")
    return (name, int(seq)) if sep and seq.isdigit() else (None, None)


class DeltaSink:
    """A group's sink at ``path``, written by ``member`` for ``group`` on ``topic``."""

    def __init__(self, path: str, group: str, topic: str, member: str) -> None:
        self.path, self.group, self.topic, self.member = path, group, topic, member
        self.held: dict[int, int] = {}  # partition -> position, as last read

    def ensure(self) -> None:
        """Create the table if missing (members of a group may race to create it)."""
        for attempt in range(20):
            if DeltaTable.is_deltatable(self.path):
                return
            try:
                DeltaTable.create(self.path, SINK_SCHEMA, mode="ignore",
                                  configuration={"delta.enableChangeDataFeed": "true"})
                return
            except Exception:  # noqa: BLE001 - another member created it first: look again
                if attempt == 19:
                    raise
                time.sleep(0.3)

    def _positions(self, table: DeltaTable, partitions) -> dict[int, int]:
        out = {}
        for p in partitions:
            version = table.transaction_version(sink_app_id(self.group, self.topic, p, 0))
            if version is not None:
                out[p] = int(version)
        self.held.update(out)
        return out

    def write(self, records: list[Delivered]) -> dict[int, tuple[int, int]]:
        """Commit the records not yet in the sink, with the partitions' new positions, in one Delta
        commit; return the ranges written ([first offset, position) per partition)."""
        for attempt in range(ATTEMPTS):
            table = DeltaTable(self.path)
            held = self._positions(table, {r.partition for r in records})
            fresh, at = [], dict(held)  # each offset once: a client reset to an earlier offset repeats records in one batch
            for r in records:
                if r.offset >= at.get(r.partition, -1):
                    fresh.append(r)
                    at[r.partition] = r.offset + 1
            if not fresh:
                return {}
            ranges: dict[int, tuple[int, int]] = {}
            for r in fresh:
                lo, hi = ranges.get(r.partition, (r.offset, r.offset + 1))
                ranges[r.partition] = (min(lo, r.offset), max(hi, r.offset + 1))
            try:
                write_deltalake(table, self._rows(fresh), mode="append", commit_properties=CommitProperties(
                    custom_metadata={"userMetadata": sink_commit_metadata(self.group, self.topic, self.member, ranges)},
                    max_commit_retries=0,
                    app_transactions=[Transaction(sink_app_id(self.group, self.topic, p, 0), hi)
                                      for p, (_lo, hi) in sorted(ranges.items())]))
            except CommitFailedError:  # another member committed since the read: read the positions again
                time.sleep(0.05 * (1 + attempt % 5))
                continue
            self.held.update({p: hi for p, (_lo, hi) in ranges.items()})
            return ranges
        raise RuntimeError(f"the sink {self.path} kept moving: {ATTEMPTS} commits lost in a row")

    def _rows(self, records: list[Delivered]) -> pa.Table:
        named = [named_by_value(r.value) for r in records]
        return pa.Table.from_pylist([
            {"topic": self.topic, "partition": r.partition, "offset": r.offset, "leader_epoch": r.leader_epoch,
             "key": r.key, "value": r.value,
             "timestamp": None if r.timestamp_ms is None else datetime.fromtimestamp(r.timestamp_ms / 1000, timezone.utc),
             "producer_id": producer, "sequence": seq}
            for r, (producer, seq) in zip(records, named)], schema=SINK_SCHEMA)
