"""Partition assignors (Kafka's ``partition.assignment.strategy``), as pure functions.

Each takes the members' subscriptions (and, for the sticky ones, what each member owns or last
owned) and a list of partitions, and returns member -> partitions. The leader runs the chosen
assignor twice per generation, once over undeleted and once over marked partitions (rule 11),
so new data stays balanced. Cooperative withholding of moving partitions is the rebalance
protocol's job (control_plane.groups), not the assignor's, so every assignor is safe with it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from pydantic import BaseModel, ConfigDict, Field

from control_plane.records import TopicPartition
from log_store.config import ASSIGNORS
from log_store.errors import InvalidConfigurationError


class Subscription(BaseModel):
    model_config = ConfigDict(frozen=True)

    member_id: str
    topics: list[str]
    owned: list[TopicPartition] = Field(default_factory=list)


Assignment = dict[str, list[TopicPartition]]
Assignor = Callable[[list[Subscription], list[TopicPartition]], Assignment]


def _eligible(members: list[Subscription], tp: TopicPartition) -> list[str]:
    return sorted(m.member_id for m in members if tp.topic in m.topics)


def _empty(members: list[Subscription]) -> Assignment:
    return {m.member_id: [] for m in members}


def range_assign(members: list[Subscription], partitions: list[TopicPartition]) -> Assignment:
    """Per topic, contiguous ranges over members sorted by id; the first few get one extra."""
    out = _empty(members)
    for topic in sorted({tp.topic for tp in partitions}):
        tps = sorted((tp for tp in partitions if tp.topic == topic), key=lambda tp: tp.partition)
        subs = _eligible(members, tps[0])
        if not subs:
            continue
        base, extra = divmod(len(tps), len(subs))
        start = 0
        for i, member in enumerate(subs):
            size = base + (1 if i < extra else 0)
            out[member].extend(tps[start:start + size])
            start += size
    return out


def roundrobin_assign(members: list[Subscription], partitions: list[TopicPartition]) -> Assignment:
    """All partitions sorted, dealt in turn to the members subscribed to their topic."""
    out = _empty(members)
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


def sticky_assign(members: list[Subscription], partitions: list[TopicPartition]) -> Assignment:
    """Balanced (sizes differ by at most one), keeping as many owned partitions as balance allows."""
    out = _empty(members)
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
        subs = _eligible(members, tp)
        if subs:
            out[min(subs, key=lambda m: (len(out[m]), m))].append(tp)
    return out


ASSIGNOR_FUNCTIONS: dict[str, Assignor] = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
    "sticky": sticky_assign,
    "cooperative-sticky": sticky_assign,  # the same plan; the cooperative protocol withholds moves
}
assert set(ASSIGNOR_FUNCTIONS) == set(ASSIGNORS)


def assignor(name: str) -> Assignor:
    try:
        return ASSIGNOR_FUNCTIONS[name]
    except KeyError:
        raise InvalidConfigurationError(
            f"unknown assignor '{name}': choose one of {', '.join(ASSIGNORS)}"
        ) from None


def assign_lists(name: str, members: list[Subscription], lists: Iterable[list[TopicPartition]]) -> Assignment:
    """Run the assignor over each partition list separately and merge (rule 11)."""
    fn = assignor(name)
    out = _empty(members)
    for tps in lists:
        if not tps:
            continue
        part = fn(members, tps)
        for member, got in part.items():
            out[member].extend(got)
    return out
