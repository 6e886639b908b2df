"""Kafka's RoundRobinAssignor: every partition dealt in turn."""

from __future__ import annotations

from control_plane.assignors.base import Assignment, Subscription, empty
from control_plane.records import TopicPartition


def roundrobin_assign(members: list[Subscription], partitions: list[TopicPartition]) -> Assignment:
    """All partitions sorted, dealt in turn to the members subscribed to their topic."""
    out = empty(members)
    ring = sorted(m.member_id for m in members)
    if not ring:
        return out
    topics = {m.member_id: set(m.topics) for m in members}
    turn = 0
    for tp in sorted(partitions, key=lambda tp: (tp.topic, tp.partition)):
        for step in range(len(ring)):
            member = ring[(turn + step) % len(ring)]
            if tp.topic in topics[member]:
                out[member].append(tp)
                turn = (turn + step + 1) % len(ring)
                break
    return out
