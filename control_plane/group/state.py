"""The group protocol's states: which rebalance protocol a generation runs, and what one poll
changed for a member (a member's own states, joining/stable/left, are ``records.MemberState``)."""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from pydantic import BaseModel, Field

from control_plane.records import TopicPartition


class RebalanceProtocol(str, Enum):
    """How a generation moves partitions: eager members give up everything before each
    rebalance; cooperative members keep what stays theirs; mixed is an upgrade in progress."""

    EAGER = "eager"
    COOPERATIVE = "cooperative"
    MIXED = "mixed"


class MembershipChange(BaseModel):
    """What one poll changed for this member."""

    generation: int
    assigned: list[TopicPartition] = Field(default_factory=list)
    revoked: list[TopicPartition] = Field(default_factory=list)
    lost: list[TopicPartition] = Field(default_factory=list)
    warmups: list[TopicPartition] = Field(default_factory=list)
    rebalancing: bool = False

    def given_up(self, partitions: list[TopicPartition], lost: bool = False) -> None:
        """Partitions revoked (or lost) in this poll. One poll can assign a partition and then
        revoke it (an eager member adopts generation N, then rejoins for N+1): the consumer
        applies revocations before assignments, so a partition given up after it was assigned
        must not stay in ``assigned``, or the consumer would deliver it without owning it."""
        (self.lost if lost else self.revoked).extend(partitions)
        gone = set(partitions)
        self.assigned = [tp for tp in self.assigned if tp not in gone]


PositionsFn = Callable[[], dict[TopicPartition, int]]
