"""What one poll of a group member reads, as one frozen value (in the style of ``control_plane.image``).

``GroupMember`` reads the group tables once per poll (each at one table version) into a
``GroupImage``; the member's rules (``control_plane.group.lifecycle``) decide from it alone, so
they can be tested from hand-made images without Spark. Liveness is judged by the reader on its
own monotonic clock when it builds the image (``control_plane.liveness``); the image holds the
verdict, not the clocks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from control_plane.records import GenerationRecord, Handover, MemberHeartbeat, TopicPartition

PartitionLists = tuple[list[TopicPartition], list[TopicPartition]]


@dataclass(frozen=True)
class GroupImage:
    group: str
    generation: GenerationRecord | None  # the latest generation
    live: Mapping[str, MemberHeartbeat] = field(default_factory=dict)  # the other members judged alive and in the group
    partition_lists: PartitionLists | None = None  # undeleted, marked: read once a heartbeat interval
    revocations: Mapping[TopicPartition, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    now: float = 0.0  # the reader's monotonic clock when the read began
    heartbeat_due: bool = False

    def released(self, pending: tuple[Handover, ...], generation: int) -> frozenset[TopicPartition]:
        """The partitions of ``pending`` whose previous owner committed their revocation in
        ``generation`` or later (``revocations``: (member, generation) per partition)."""
        out = set()
        for h in pending:
            tp = TopicPartition(topic=h.topic, partition=h.partition)
            if any(m == h.from_member and g >= generation for m, g in self.revocations.get(tp, ())):
                out.add(tp)
        return frozenset(out)

    def published(self, topic: str) -> dict[int, int]:
        """The highest position the live members published per partition of ``topic`` (rule 10)."""
        out: dict[int, int] = {}
        for beat in self.live.values():
            for pos in beat.positions:
                if pos.topic == topic:
                    out[pos.partition] = max(out.get(pos.partition, -1), pos.offset)
        return out
