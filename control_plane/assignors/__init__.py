"""Partition assignors (Kafka's ``partition.assignment.strategy``), as pure functions.

Each takes the members' subscriptions (and, for the sticky ones, what each member owns or last
owned) and a list of partitions, and returns member -> partitions. The leader runs the chosen
assignor twice per generation, once over undeleted and once over marked partitions (rule 11),
so new data stays balanced. Cooperative withholding of moving partitions is the rebalance
protocol's job (control_plane.group.reconcile), not the assignor's, so every assignor is safe with it.
"""

from __future__ import annotations

from collections.abc import Iterable

from control_plane.assignors.base import Assignment, Assignor, Subscription, empty
from control_plane.assignors.range import range_assign
from control_plane.assignors.roundrobin import roundrobin_assign
from control_plane.assignors.sticky import sticky_assign
from control_plane.records import TopicPartition
from control_plane.settings import ASSIGNORS
from log_store.errors import InvalidConfigurationError

__all__ = ["ASSIGNOR_FUNCTIONS", "Assignment", "Subscription", "assign_lists", "assignor",
           "range_assign", "roundrobin_assign", "sticky_assign"]

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
    out = empty(members)
    for tps in lists:
        if not tps:
            continue
        part = fn(members, tps)
        for member, got in part.items():
            out[member].extend(got)
    return out
