"""The assignor interface: members' subscriptions in, member -> partitions out."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from control_plane.records import TopicPartition


class Subscription(BaseModel):
    model_config = ConfigDict(frozen=True)

    member_id: str
    topics: list[str]
    owned: list[TopicPartition] = Field(default_factory=list)


Assignment = dict[str, list[TopicPartition]]
Assignor = Callable[[list[Subscription], list[TopicPartition]], Assignment]


def eligible(members: list[Subscription], tp: TopicPartition) -> list[str]:
    return sorted(m.member_id for m in members if tp.topic in m.topics)


def empty(members: list[Subscription]) -> Assignment:
    return {m.member_id: [] for m in members}
