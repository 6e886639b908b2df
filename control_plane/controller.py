"""The topic controller: grows and shrinks topics and retires marked partitions (rules 4-7).

Two tables take part in every step. The ``topics`` control table holds the intent and the
history: each change is the next ``TopicRecord`` version, inserted with a compare-and-set on
``(topic, topic_version)``, so of two racing controllers one wins. The log table's properties
are the commit point every producer and consumer obeys: the controller applies the latest record
to them in one conditional metadata commit (all epochs, the count and the modes at once). Every
command first finishes what the latest record asks for (``resume``), so a controller killed
anywhere is completed by re-running any command, and a recorded change is applied exactly once:
no epoch is bumped twice.

Partition numbers. The partitioner sends keys to ``0..undeleted_partition_count-1``, so the
undeleted partitions are always exactly those numbers and a grown topic's new partitions are
numbered from the current count up (the source's "partitions without a znode"). A number whose
partition was retired is reused: its epoch continues from the retired one (``leader_epoch`` never
decreases along offsets) and its offsets continue after the old log end. A number whose partition
is still marked (ReadOnly) blocks growth over it until it is retired: reviving it would lift the
upper-offset gate (rule 9) that orders its remaining records before the same keys' newer ones.
"""

from __future__ import annotations

import math
import os
import random
import re
import socket
import time
from datetime import datetime

from pydantic import BaseModel
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from control_plane.layout import RootLayout
from control_plane.offsets import GroupOffsets
from control_plane.records import PartitionState, TopicEvent, TopicRecord, utcnow
from control_plane.tables import ControlTables
from control_plane.topics import MAX_PARTITIONS
from log_store.config import ControllerSettings
from log_store.crash import crash_point
from log_store.delta_txn import DeltaTransaction, conflict_name
from log_store.errors import (
    ConcurrentAppendError,
    ConcurrentTopicChangeError,
    InvalidConfigurationError,
    InvalidPartitionsError,
    LakelogError,
    UnknownTopicError,
)
from log_store.topic_log import (
    Mode,
    PartitionMetadata,
    TopicLog,
    TopicLogMetadata,
    TOPIC_VERSION_PROP,
    end_offset_prop,
    log_end_app_id,
)

_ATTEMPTS = 10
_PARTITION_DIR = re.compile(r"/partition=(-?\d+)/")
_SWITCH_HINT = (
    "set `controller.delete_partition_enable: true` in the configuration, or "
    "LAKELOG_DELETE_PARTITION_ENABLE=true, or pass --delete-partition-enable"
)


def _backoff(attempt: int) -> None:
    time.sleep(0.05 * (1 + random.random()) * min(attempt + 1, 10))


class AlterResult(BaseModel):
    """What ``alter`` did. ``event`` is None when there was nothing to change."""

    topic: str
    previous_count: int
    undeleted_partition_count: int
    topic_version: int
    event: TopicEvent | None
    resumed: bool = False  # an interrupted earlier change was finished first
    note: str = ""


class TickResult(BaseModel):
    """What one ``tick`` did to one topic."""

    topic: str
    topic_version: int
    retired: list[int] = []  # marked partitions retired by this tick
    purged: list[int] = []  # retired partitions whose rows this tick deleted
    waiting: dict[int, float] = {}  # marked partitions still holding records: seconds of delay left
    resumed: bool = False


# -- the rules, as pure functions of the latest record ---------------------------------------------
def log_metadata(record: TopicRecord) -> TopicLogMetadata:
    """The log-table metadata a record stands for."""
    return TopicLogMetadata(
        topic=record.topic,
        undeleted_partition_count=record.undeleted_partition_count,
        partitions={
            p.partition: PartitionMetadata(partition=p.partition, leader_epoch=p.leader_epoch, mode=p.mode,
                                           start_offset=p.start_offset)
            for p in record.partitions
        },
    )


def _successor(record: TopicRecord, event: TopicEvent, parts: dict[int, PartitionState], count: int,
               now: datetime) -> TopicRecord:
    return TopicRecord(
        topic=record.topic,
        topic_version=record.topic_version + 1,
        event=event,
        location=record.location,
        partition_count=sum(p.mode is not Mode.NONE for p in parts.values()),  # the assignment
        undeleted_partition_count=count,
        partitions=[parts[p] for p in sorted(parts)],
        changed_at=now,
        changed_by=f"controller@{socket.gethostname()}:{os.getpid()}",
    )


def _bumped(parts: dict[int, PartitionState], count: int) -> dict[int, int]:
    """Bump every undeleted partition's epoch in ``parts``; return the epochs before the bump."""
    before = {p: parts[p].leader_epoch for p in range(count)}
    for p, epoch in before.items():
        parts[p] = parts[p].model_copy(update={"leader_epoch": epoch + 1})
    return before


def plan_expand(record: TopicRecord, count: int, now: datetime) -> TopicRecord:
    """Rule 4: bump each undeleted partition p; new partition q gets ``epoch_after_creation = {p: e_p}``."""
    parts = {p.partition: p for p in record.partitions}
    k = record.undeleted_partition_count
    blocked = [q for q in range(k, count) if q in parts and parts[q].mode is Mode.READ_ONLY]
    if blocked:
        raise InvalidPartitionsError(
            f"cannot grow '{record.topic}' to {count} partitions: partition(s) {blocked} are marked for deletion "
            f"and their numbers are needed: grow after `lakelog controller tick` has retired them (once drained "
            f"or past their delete delay)" + (f", or grow to at most {min(blocked)} now" if min(blocked) > k else "")
        )
    before = _bumped(parts, k)
    for q in range(k, count):
        retired = parts.get(q)  # None, or a retired partition whose number is reused
        parts[q] = PartitionState(
            partition=q,
            leader_epoch=0 if retired is None else retired.leader_epoch + 1,
            start_offset=0 if retired is None else retired.end_offset or 0,
            epoch_after_creation=before,
        )
    return _successor(record, TopicEvent.EXPAND, parts, count, now)


def plan_shrink(record: TopicRecord, count: int, now: datetime) -> TopicRecord:
    """Rule 5: each P1 >= count gets ``epoch_before_deletion = {P2: e_P2}`` and ReadOnly; each P2 is bumped."""
    parts = {p.partition: p for p in record.partitions}
    before = _bumped(parts, count)
    for p1 in range(count, record.undeleted_partition_count):
        parts[p1] = parts[p1].model_copy(update={
            "mode": Mode.READ_ONLY, "epoch_before_deletion": before, "marked_for_deletion_at": now,
        })
    return _successor(record, TopicEvent.MARK_DELETION, parts, count, now)


def plan_retire(record: TopicRecord, ends: dict[int, int], now: datetime) -> TopicRecord:
    """Rule 7: the marked partitions (-> their final log end) go to mode None (out of the
    assignment); the count stays. The record keeps each one's end: a group that had not read
    that far reports the rest expired, and a reused number's offsets continue after it."""
    parts = {p.partition: p for p in record.partitions}
    for p, end in ends.items():
        parts[p] = parts[p].model_copy(update={"mode": Mode.NONE, "retired_at": now, "end_offset": end})
    return _successor(record, TopicEvent.RETIRE, parts, record.undeleted_partition_count, now)


def essence(record: TopicRecord) -> dict:
    """A record without its timestamps and author: equal for the same change made by two controllers."""
    return record.model_dump(exclude={
        "changed_at": True, "changed_by": True,
        "partitions": {"__all__": {"marked_for_deletion_at", "retired_at"}},
    })


class TopicController:
    """Grows, shrinks and retires the partitions of the topics under one root."""

    def __init__(self, spark: SparkSession, root: str, settings: ControllerSettings | None = None) -> None:
        self.spark = spark
        self.layout = RootLayout(root)
        self.tables = ControlTables(spark, self.layout)
        self.settings = settings or ControllerSettings()

    # -- public --------------------------------------------------------------------------------
    def alter(self, topic: str, partitions: int) -> AlterResult:
        """Move ``topic`` to ``partitions`` undeleted partitions: grow (rule 4) or, if enabled, shrink (rule 5).

        The same count is a no-op (after finishing any interrupted change), so re-running a
        killed ``alter`` is how it is completed.
        """
        if isinstance(partitions, bool) or not isinstance(partitions, int) or not 1 <= partitions <= MAX_PARTITIONS:
            raise InvalidPartitionsError(
                f"invalid partition count {partitions} for '{topic}': a topic keeps between 1 and "
                f"{MAX_PARTITIONS} undeleted partitions"
            )
        record, resumed = self._resume(topic)
        k = record.undeleted_partition_count
        result = AlterResult(topic=topic, previous_count=k, undeleted_partition_count=k,
                             topic_version=record.topic_version, event=None, resumed=resumed)
        if partitions == k:
            return result.model_copy(update={"note": f"'{topic}' already has {k} undeleted partitions; nothing to change"})
        if partitions < k and not self.settings.delete_partition_enable:
            raise InvalidPartitionsError(
                f"'{topic}' has {k} undeleted partitions; {partitions} would shrink it, marking partitions "
                f"{partitions}..{k - 1} for deletion, and partition deletion is disabled: to grow, pass more than "
                f"{k}; to shrink, {_SWITCH_HINT}"
            )
        now = utcnow()
        target = plan_expand(record, partitions, now) if partitions > k else plan_shrink(record, partitions, now)
        crash_point("alter:before_record")
        if self._insert(target):
            crash_point("alter:after_record")
            self._apply(topic, target)
            crash_point("alter:after_apply")
            return result.model_copy(update={"undeleted_partition_count": partitions,
                                             "topic_version": target.topic_version, "event": target.event})
        winner = self._read(topic, target.topic_version)
        if winner is not None and essence(winner) == essence(target):
            self._apply(topic, winner)
            return result.model_copy(update={
                "undeleted_partition_count": partitions, "topic_version": winner.topic_version,
                "note": f"another controller made this change ({winner.changed_by}); nothing more to do",
            })
        raise ConcurrentTopicChangeError(
            f"'{topic}' was changed by another controller first (version {target.topic_version}: "
            f"{winner.event.value if winner else 'unknown'} to {winner.undeleted_partition_count if winner else '?'} "
            f"undeleted partitions); nothing was changed here: check `lakelog topics describe --topic {topic}` and re-run"
        )

    def resume(self, topic: str) -> TopicRecord:
        """Finish whatever the latest record asks for; return it (a no-op when nothing is pending)."""
        return self._resume(topic)[0]

    def tick(self, topic: str | None = None, delete_delay: float | None = None) -> list[TickResult]:
        """Rule 7, run periodically: retire marked partitions that are drained or past the delete delay.

        Drained is the source's "log start == log end": the partition holds no records, or every
        group consuming the topic has consumed it to its log end. A
        retired partition goes to mode None (producers and consumers skip it) and then its rows
        are deleted; its records stay in the record history, Delta's history and change feed.
        """
        delay = self.settings.delete_delay_seconds if delete_delay is None else delete_delay
        if not isinstance(delay, (int, float)) or math.isnan(delay) or delay < 0:
            raise InvalidConfigurationError(
                f"invalid delete delay {delete_delay}: pass a number of seconds >= 0 (--delete-delay)"
            )
        if topic is not None:
            names = [topic]
        else:
            rows = self.tables.read("topics").select("topic").distinct().collect()
            names = sorted(r["topic"] for r in rows)
        return [self._tick(name, float(delay)) for name in names]

    # -- steps ---------------------------------------------------------------------------------
    def _tick(self, topic: str, delay: float) -> TickResult:
        for _ in range(_ATTEMPTS):
            record, resumed = self._resume(topic)
            result = TickResult(topic=topic, topic_version=record.topic_version, resumed=resumed)
            marked = [p for p in record.partitions if p.mode is Mode.READ_ONLY and p.marked_for_deletion_at]
            if not marked:
                return result
            now = utcnow()
            ends = {p: pm.end_offset for p, pm in TopicLog(self.spark, record.location).metadata().partitions.items()
                    if pm.end_offset is not None}
            drained = self._drained(topic, {p.partition: (p.start_offset, ends[p.partition]) for p in marked})
            left = {p.partition: delay - (now - p.marked_for_deletion_at).total_seconds() for p in marked}
            due = [p for p, s in left.items() if p in drained or s <= 0]
            waiting = {p: round(s, 3) for p, s in left.items() if p not in due}
            if not due:
                return result.model_copy(update={"waiting": waiting})
            target = plan_retire(record, {p: ends[p] for p in due}, now)
            crash_point("retire:before_record")
            if not self._insert(target):
                continue  # another controller changed the topic first: start over from its result
            crash_point("retire:after_record")
            self._apply(topic, target)
            crash_point("retire:after_apply")
            purged = self._purge(target.location)
            return result.model_copy(update={"topic_version": target.topic_version, "retired": due,
                                             "purged": purged, "waiting": waiting})
        raise ConcurrentTopicChangeError(f"'{topic}' kept changing under the controller's tick; run it again")

    def _drained(self, topic: str, spans: dict[int, tuple[int, int]]) -> set[int]:
        """Marked partitions (-> [start, end) of their records) that hold nothing, or that every
        group with an interest in ``topic`` has consumed to the end.

        A group has an interest once a member of it subscribed to the topic or it committed a
        position on it, whether it has committed on the marked partition yet or not: a group
        that has not read a partition has not drained it. lakelog keeps records until
        retirement, so "log start == log end" (the source's drained) only holds for empty ones. A
        topic no group reads yet keeps its records for the delay: a group may still come for them.
        """
        offsets = GroupOffsets(self.spark, self.layout.root)
        positions = [offsets.committed(group, topic) for group in offsets.interested_groups(topic)]
        return {p for p, (start, end) in spans.items()
                if end <= start or (positions and all(pos.get(p, start) >= end for pos in positions))}

    def _resume(self, topic: str) -> tuple[TopicRecord, bool]:
        record, applied = self._apply(topic)
        purged = self._purge(record.location)
        return record, applied or bool(purged)

    def _read(self, topic: str, version: int | None = None) -> TopicRecord | None:
        df = self.tables.read("topics").where(F.col("topic") == topic)
        if version is not None:
            df = df.where(F.col("topic_version") == version)
        row = df.orderBy(F.col("topic_version").desc()).limit(1).collect()
        return TopicRecord.model_validate(row[0].asDict(recursive=True)) if row else None

    def _latest(self, topic: str) -> TopicRecord:
        record = self._read(topic)
        if record is None:
            raise UnknownTopicError(
                f"unknown topic '{topic}' under {self.layout.root}; "
                f"create it with `lakelog topics create --topic {topic} --partitions N`"
            )
        return record

    def _insert(self, target: TopicRecord) -> bool:
        """The compare-and-set: True if ``target`` became the next version, False if another did."""
        for attempt in range(_ATTEMPTS):
            try:
                return self.tables.insert_if_absent("topics", [target.row()], ["topic", "topic_version"]) == 1
            except Exception as exc:  # any concurrent insert (other topics too) fails the MERGE
                # insert_if_absent converts py4j conflicts, but pyspark raises Delta's own
                # delta.exceptions.Concurrent* classes, which it lets through.
                if not isinstance(exc, ConcurrentAppendError) and not conflict_name(exc):
                    raise
                if self._read(target.topic, target.topic_version) is not None:
                    return False
                _backoff(attempt)
        raise ConcurrentTopicChangeError(f"could not record the change to '{target.topic}'; run it again")

    def _apply(self, topic: str, record: TopicRecord | None = None) -> tuple[TopicRecord, bool]:
        """Set the log's metadata from ``record`` (default: the latest) in one commit, unless applied.

        The commit carries the record's version and is made only if the log's snapshot holds an
        older one; it fails if the metadata changes after that snapshot. So a slow controller
        can never roll the log back to an older record: a newer one applied before our snapshot
        is seen, one applied after it fails our commit (and the retry sees it).

        The same commit fixes each newly marked partition's final log end (``end_offset``): it
        depends on the partition's log end, so an append that lands first makes it retry, and
        no append can land after it. New partition numbers get their log end 0.
        """
        record = record or self._latest(topic)
        wanted = log_metadata(record)
        for attempt in range(_ATTEMPTS):
            txn = DeltaTransaction.start(self.spark, record.location)
            conf = txn.configuration()
            # A log never touched by the controller is as ``topics create`` made it: version 1.
            if int(conf.get(TOPIC_VERSION_PROP, "1")) >= record.topic_version:
                return record, False
            known = txn.snapshot_app_versions()
            props = {**wanted.to_properties(), TOPIC_VERSION_PROP: str(record.topic_version)}
            drop = []
            for p, pm in wanted.partitions.items():
                key = end_offset_prop(p)
                if pm.mode is Mode.READ_WRITE:
                    drop += [key] if key in conf else []
                elif key in conf:
                    props[key] = conf[key]
                else:
                    txn.app_version(log_end_app_id(p))
                    props[key] = str(max(known.get(log_end_app_id(p), 0), 0))
            new_ends = {log_end_app_id(p): pm.start_offset for p, pm in wanted.partitions.items()
                        if log_end_app_id(p) not in known}
            try:
                txn.commit_properties(props, drop, new_ends)
                return record, True
            except ConcurrentAppendError:
                _backoff(attempt)
        raise ConcurrentTopicChangeError(f"the log of '{topic}' kept changing under the controller; run it again")

    def _partitions_with_rows(self, location: str) -> set[int]:
        """Partitions that still have data files (from the Delta snapshot: no data is read)."""
        files = self.spark.read.format("delta").load(location).inputFiles()
        return {int(m.group(1)) for f in files if (m := _PARTITION_DIR.search(f))}

    def _purge(self, location: str) -> list[int]:
        """Delete the rows of retired (mode None) partitions that still have any; return those.

        Only offsets below each partition's final end (fixed at its mark) are deleted, so a
        number reused by a later expansion never loses its new rows, which start at that end.
        """
        meta = TopicLog(self.spark, location).metadata()
        ends = {p: pm.end_offset for p, pm in meta.partitions.items()
                if pm.mode is Mode.NONE and pm.end_offset is not None}
        holding = sorted(set(ends) & self._partitions_with_rows(location)) if ends else []
        if not holding:
            return []
        ends = {p: ends[p] for p in holding}
        cond = " OR ".join(f"(partition = {p} AND offset < {end})" for p, end in ends.items())
        for attempt in range(_ATTEMPTS):
            try:
                self.spark.sql(f"DELETE FROM delta.`{location}` WHERE {cond}")
                break
            except Exception as exc:
                if not conflict_name(exc) or attempt == _ATTEMPTS - 1:
                    raise
                _backoff(attempt)
        crash_point("retire:after_purge")
        return holding
