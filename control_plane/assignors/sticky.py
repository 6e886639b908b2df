"""Kafka's StickyAssignor (and the plan of CooperativeStickyAssignor): balanced, moving as little as it can."""

from __future__ import annotations

from control_plane.assignors.base import Assignment, Subscription, eligible, empty
from control_plane.records import TopicPartition


def sticky_assign(members: list[Subscription], partitions: list[TopicPartition]) -> Assignment:
    """Balanced (sizes differ by at most one), keeping as many owned partitions as balance allows."""
    out = empty(members)
    if not members:
        return out
    wanted = set(partitions)
    base, extra = divmod(len(partitions), len(members))
    taken: set[TopicPartition] = set()
    valid = {m.member_id: [tp for tp in m.owned if tp in wanted and tp.topic in m.topics] for m in members}
    # Members that own the most keep the extra slots, so fewer partitions move.
    for member in sorted(valid, key=lambda m: (-len(valid[m]), m)):
        cap = base
        if extra and len(valid[member]) > base:
            cap, extra = base + 1, extra - 1
        keep = [tp for tp in sorted(valid[member], key=lambda tp: (tp.topic, tp.partition)) if tp not in taken][:cap]
        out[member] = keep
        taken.update(keep)
    for tp in sorted(wanted - taken, key=lambda tp: (tp.topic, tp.partition)):
        subs = eligible(members, tp)
        if subs:
            out[min(subs, key=lambda m: (len(out[m]), m))].append(tp)
    return out
