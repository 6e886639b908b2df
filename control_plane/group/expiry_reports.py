"""What a group owes as expired: the records of retired partitions it neither delivered nor
reported, as a leader reports them for partitions no member owns and an owner for its own
(``offsets.owed_expiry``, ``offsets.unreported_expiry`` judge; this reads what they judge)."""

from __future__ import annotations

from collections.abc import Callable

from control_plane.group.offsets import owed_expiry, unreported_expiry
from control_plane.group.store import GroupTables
from control_plane.records import ExpiredRange, GenerationRecord, MemberHeartbeat, TopicPartition


def expired_since(tables: GroupTables, group: str, gen: GenerationRecord | None, versions: dict[str, int],
                  joined: list[MemberHeartbeat], group_positions: Callable[[str], dict[int, int]]
                  ) -> list[ExpiredRange]:
    """The records of partitions retired within the group's view that it had neither
    delivered nor reported, for partitions no joined member owns (an owner reports its own
    on revoking).

    A group's view starts at its first generation (or at the first one that subscribed to a
    topic, in its current incarnation: ``GroupTables.view_start``): partitions retired before it
    were never the group's to deliver. Not only since the previous generation: an owner that led the generation dropping its retired partition
    and died before revoking it left the report to no one (campaign seed 94); what was
    delivered or reported already is left out by ``owed_expiry``.
    """
    if gen is None:
        return []
    owned = {tp for b in joined for tp in b.owned}
    out: list[ExpiredRange] = []
    for topic, upto in versions.items():
        after = tables.view_start(group, topic)
        if after is None:  # no generation saw this incarnation of the topic: nothing is owed
            continue
        retired = [r for r in tables.retired_between(topic, after, upto)
                   if TopicPartition(topic=topic, partition=r[0]) not in owned]
        if retired:
            out += owed_expiry(topic, retired, group_positions(topic), tables.offsets.expired(group, topic))
    return out


def expired_of(tables: GroupTables, group: str, rows: dict[TopicPartition, int]) -> list[ExpiredRange]:
    """What an owner must report expired of its partitions (``rows``: partition -> position, -1 unknown)."""
    out: list[ExpiredRange] = []
    for topic in sorted({tp.topic for tp in rows}):
        snap = tables.snapshots([topic], ends=True).get(topic)  # log starts: owed expiry
        if snap is None:
            continue
        numbers = [tp.partition for tp in rows if tp.topic == topic]
        known = {tp.partition: o for tp, o in rows.items() if tp.topic == topic and o >= 0}
        out += unreported_expiry(topic, snap, numbers, known,
                                 lambda: tables.retired_between(topic, -1, snap.topic_version),
                                 lambda: tables.offsets.expired(group, topic))
    return out
