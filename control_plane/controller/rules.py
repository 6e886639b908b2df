"""The resize rules (4, 5, 7) as pure functions of a topic's latest record: no Spark, no I/O.

``plan_expand``, ``plan_shrink`` and ``plan_retire`` compute the next record; ``log_metadata`` is
what a record asks of the log table; ``drained`` and ``due`` decide which marked partitions a
tick retires. ``TopicController`` (this package) records and applies what they return.
"""

from __future__ import annotations

import os
import socket
from datetime import datetime

from control_plane.records import MAX_PARTITIONS, PartitionState, TopicEvent, TopicRecord
from log_store.errors import InvalidPartitionsError
from log_store.log_metadata import Mode, PartitionMetadata, TopicLogMetadata

SWITCH_HINT = (
    "set `controller.delete_partition_enable: true` in the configuration, or "
    "LAKELOG_DELETE_PARTITION_ENABLE=true, or pass --delete-partition-enable"
)


def check_count(topic: str, partitions: object) -> int:
    """``partitions`` if it is a partition count a topic can keep; InvalidPartitionsError otherwise."""
    if isinstance(partitions, bool) or not isinstance(partitions, int) or not 1 <= partitions <= MAX_PARTITIONS:
        raise InvalidPartitionsError(
            f"invalid partition count {partitions} for '{topic}': a topic keeps between 1 and "
            f"{MAX_PARTITIONS} undeleted partitions"
        )
    return partitions


def plan_alter(record: TopicRecord, partitions: int, shrink_enabled: bool, now: datetime) -> TopicRecord | None:
    """The next record for moving ``record``'s topic to ``partitions`` undeleted partitions (None:
    it has them already). A shrink needs the partition-deletion switch."""
    k = record.undeleted_partition_count
    if partitions == k:
        return None
    if partitions < k and not shrink_enabled:
        raise InvalidPartitionsError(
            f"'{record.topic}' has {k} undeleted partitions; {partitions} would shrink it, marking partitions "
            f"{partitions}..{k - 1} for deletion, and partition deletion is disabled: to grow, pass more than "
            f"{k}; to shrink, {SWITCH_HINT}"
        )
    return plan_expand(record, partitions, now) if partitions > k else plan_shrink(record, partitions, now)


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
        deleted=record.event.removes_topic,
    )


def plan_elect(record: TopicRecord, location: str, now: datetime) -> TopicRecord:
    """A replicated topic's leader moved to the log at ``location``: every live partition's epoch
    is bumped (records the new leader writes carry it, as Kafka's do), nothing else changes."""
    parts = {p.partition: p if p.mode is Mode.NONE else p.model_copy(update={"leader_epoch": p.leader_epoch + 1})
             for p in record.partitions}
    nxt = successor(record, TopicEvent.ELECT_LEADER, parts, record.undeleted_partition_count, now)
    return nxt.model_copy(update={"location": location})


def plan_delete(record: TopicRecord, event: TopicEvent, now: datetime) -> TopicRecord:
    """The next step of a topic deletion (DELETING, then DELETED): partitions kept as they were,
    so the history shows what the topic held when it went."""
    return successor(record, event, {p.partition: p for p in record.partitions}, record.undeleted_partition_count, now)


def successor(record: TopicRecord, event: TopicEvent, parts: dict[int, PartitionState], count: int,
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


def bump_epochs(parts: dict[int, PartitionState], count: int) -> dict[int, int]:
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
    before = bump_epochs(parts, k)
    for q in range(k, count):
        retired = parts.get(q)  # None, or a retired partition whose number is reused
        parts[q] = PartitionState(
            partition=q,
            leader_epoch=0 if retired is None else retired.leader_epoch + 1,
            start_offset=0 if retired is None else retired.end_offset or 0,
            epoch_after_creation=before,
        )
    return successor(record, TopicEvent.EXPAND, parts, count, now)


def plan_shrink(record: TopicRecord, count: int, now: datetime) -> TopicRecord:
    """Rule 5: each P1 >= count gets ``epoch_before_deletion = {P2: e_P2}`` and ReadOnly; each P2 is bumped."""
    parts = {p.partition: p for p in record.partitions}
    before = bump_epochs(parts, count)
    for p1 in range(count, record.undeleted_partition_count):
        parts[p1] = parts[p1].model_copy(update={
            "mode": Mode.READ_ONLY, "epoch_before_deletion": before, "marked_for_deletion_at": now,
        })
    return successor(record, TopicEvent.MARK_DELETION, parts, count, now)


def plan_retire(record: TopicRecord, ends: dict[int, int], now: datetime) -> TopicRecord:
    """Rule 7: the marked partitions (-> their final log end) go to mode None (out of the
    assignment); the count stays. The record keeps each one's end: a group that had not read
    that far reports the rest expired, and a reused number's offsets continue after it."""
    parts = {p.partition: p for p in record.partitions}
    for p, end in ends.items():
        parts[p] = parts[p].model_copy(update={"mode": Mode.NONE, "retired_at": now, "end_offset": end})
    return successor(record, TopicEvent.RETIRE, parts, record.undeleted_partition_count, now)


def essence(record: TopicRecord) -> dict:
    """A record without its timestamps and author: equal for the same change made by two controllers."""
    return record.model_dump(exclude={
        "changed_at": True, "changed_by": True,
        "partitions": {"__all__": {"marked_for_deletion_at", "retired_at"}},
    })


def drained(spans: dict[int, tuple[int, int]], positions: list[dict[int, int]]) -> set[int]:
    """Marked partitions (-> [start, end) of their records) that hold nothing, or that every
    interested group (``positions``: each one's committed positions) has consumed to the end.

    A group that has not read a partition has not drained it. lakelog keeps records until
    retirement, so "log start == log end" (the source's drained) only holds for empty ones. A
    topic no group reads yet keeps its records for the delay: a group may still come for them.
    """
    return {p for p, (start, end) in spans.items()
            if end <= start or (positions and all(pos.get(p, start) >= end for pos in positions))}


def unread_by_groups(spans: dict[int, tuple[int, int]], positions: dict[str, dict[int, int]]) -> dict[str, dict[int, tuple[int, int]]]:
    """Of partitions retired undrained (-> [start, end)), those each interested group (``positions``:
    its committed positions) holds no position on and so never read: no consumer of the group can
    report them later (a consumer without a position starts at the log start, owing nothing), so
    the retirement reports them for the group. A group with a position reports from it itself."""
    out: dict[str, dict[int, tuple[int, int]]] = {}
    for group, pos in positions.items():
        unread = {p: (start, end) for p, (start, end) in spans.items() if end > start and p not in pos}
        if unread:
            out[group] = unread
    return out


def due(marked: list[PartitionState], drained_now: set[int], delay: float, now: datetime) -> tuple[list[int], dict[int, float]]:
    """Which marked partitions a tick retires now (drained, or past ``delay`` seconds since their
    mark), and the seconds of delay left for the others."""
    left = {p.partition: delay - (now - p.marked_for_deletion_at).total_seconds() for p in marked}
    retire = [p for p, s in left.items() if p in drained_now or s <= 0]
    return retire, {p: round(s, 3) for p, s in left.items() if p not in retire}
