"""Kafka's RangeAssignor: per topic, contiguous ranges over the members."""

from __future__ import annotations

from control_plane.assignors.base import Assignment, Subscription, eligible, empty
from control_plane.records import TopicPartition


def range_assign(members: list[Subscription], partitions: list[TopicPartition]) -> Assignment:
    """Per topic, contiguous ranges over members sorted by id; the first few get one extra."""
    out = empty(members)
    for topic in sorted({tp.topic for tp in partitions}):
        tps = sorted((tp for tp in partitions if tp.topic == topic), key=lambda tp: tp.partition)
        subs = eligible(members, tps[0])
        if not subs:
            continue
        base, extra = divmod(len(tps), len(subs))
        start = 0
        for i, member in enumerate(subs):
            size = base + (1 if i < extra else 0)
            out[member].extend(tps[start:start + size])
            start += size
    return out
