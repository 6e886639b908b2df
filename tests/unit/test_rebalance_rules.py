"""Assignors and the leader's rebalance rules without Spark: Kafka's range and round-robin plans,
the sticky plan's balance, rule 11's two lists, and eager, cooperative, mixed and warm-up moves."""

from control_plane.assignors import Subscription, assign_lists, range_assign, roundrobin_assign, sticky_assign
from control_plane.group.reconcile import plan_generation
from control_plane.records import MemberHeartbeat, MemberState, TopicPartition

T = "t"


def tps(*ps: int, topic: str = T) -> list[TopicPartition]:
    return [TopicPartition(topic=topic, partition=p) for p in ps]


def subs(*ids: str, owned: dict | None = None) -> list[Subscription]:
    return [Subscription(member_id=m, topics=[T], owned=(owned or {}).get(m, [])) for m in ids]


def test_range_and_roundrobin_follow_kafka():
    got = range_assign(subs("a", "b", "c"), tps(*range(7)))
    assert {m: [tp.partition for tp in v] for m, v in got.items()} == {"a": [0, 1, 2], "b": [3, 4], "c": [5, 6]}
    got = roundrobin_assign(subs("a", "b", "c"), tps(*range(7)))
    assert {m: [tp.partition for tp in v] for m, v in got.items()} == {"a": [0, 3, 6], "b": [1, 4], "c": [2, 5]}


def test_sticky_keeps_what_balance_allows_and_lists_are_balanced_separately():
    owned = {"a": tps(0, 1, 2, 3), "b": tps(4, 5, 6, 7)}
    got = sticky_assign(subs("a", "b", "c", owned=owned), tps(*range(8)))
    sizes = sorted(len(v) for v in got.values())
    assert sizes == [2, 3, 3]
    kept = sum(len(set(got[m]) & set(owned[m])) for m in owned)
    assert kept == 6  # only 2 of 8 move to the new member
    # rule 11: undeleted and marked partitions are balanced as two lists
    got = assign_lists("range", subs("a", "b"), [tps(0, 1, 2, 3), tps(4, 5)])
    assert {m: [tp.partition for tp in v] for m, v in got.items()} == {"a": [0, 1, 4], "b": [2, 3, 5]}


def beat(member: str, protocol: str, owned=(), previous=(), warmup=False, ready=()) -> MemberHeartbeat:
    return MemberHeartbeat(group="g", member_id=member, state=MemberState.JOINING, generation=1, joining=2,
                           protocol=protocol, topics=[T], owned=list(owned), previous=list(previous),
                           warmup=warmup, warm_ready=list(ready))


def test_leader_rules_cooperative_eager_and_mixed():
    parts = tps(*range(6))
    coop = plan_generation("g", 2, [beat("a", "cooperative", tps(0, 1, 2)), beat("b", "cooperative", tps(3, 4, 5)),
                                    beat("c", "cooperative")], parts, [], "cooperative-sticky", "a", "join")
    owner = coop.owner()
    assert coop.protocol == "cooperative" and coop.revoked == 2
    assert not coop.partitions_of("c")  # moving partitions are withheld until revoked
    assert all(owner[tp] in ("a", "b") for tp in owner) and len(owner) == 4
    eager = plan_generation("g", 2, [beat("a", "eager", previous=tps(0, 1, 2)), beat("b", "eager", previous=tps(3, 4, 5)),
                                     beat("c", "eager")], parts, [], "sticky", "a", "join", previous=coop)
    assert sorted(len(a.partitions) for a in eager.assignment) == [2, 2, 2]
    mixed = plan_generation("g", 2, [beat("a", "cooperative", tps(0, 1)), beat("b", "eager", previous=tps(2, 3))],
                            parts, [], "cooperative-sticky", "a", "upgrade")
    assert mixed.protocol == "mixed"
    assert mixed.partitions_of("a") == tps(0, 1) and mixed.partitions_of("b") == []
    warm = plan_generation("g", 2, [beat("a", "cooperative", tps(0, 1, 2, 3, 4, 5)), beat("c", "cooperative", warmup=True)],
                           parts, [], "cooperative-sticky", "a", "join")
    assert len(warm.partitions_of("a")) == 6 and len(warm.warmups_of("c")) == 3 and warm.revoked == 0
    ready = warm.warmups_of("c")
    handover = plan_generation("g", 3, [beat("a", "cooperative", tps(0, 1, 2, 3, 4, 5)),
                                        beat("c", "cooperative", warmup=True, ready=ready)],
                               parts, [], "cooperative-sticky", "a", "warm")
    assert handover.partitions_of("c") == ready and len(handover.handovers) == 3
