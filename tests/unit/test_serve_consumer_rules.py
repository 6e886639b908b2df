"""KIP-848's consumer group rules in `lakelog serve` (serve/consumer_rules.py), without Spark: the
group epoch and its target, each member's way to it (a partition is given only once its holder let
it go), the epochs a heartbeat and a commit are accepted with, and lakelog's partition lists
(undeleted and marked, rule 11) as what the server assigns."""

from __future__ import annotations

import random

import pytest

from control_plane.records import TopicPartition
from serve.consumer_rules import (
    Beat, ConsumerGroupError, ConsumerMember, GroupImage, MemberState, PartitionLists, check_epoch, commit_allowed,
    heartbeat, holders, preferred_assignor, reconcile, target_assignment, validate, without,
)


def tp(p: int, topic: str = "t") -> TopicPartition:
    return TopicPartition(topic=topic, partition=p)


def tps(*ps: int, topic: str = "t") -> frozenset[TopicPartition]:
    return frozenset(tp(p, topic) for p in ps)


def lists(n: int, marked: tuple[int, ...] = (), topic: str = "t") -> PartitionLists:
    return PartitionLists.of([tp(p, topic) for p in range(n) if p not in marked], [tp(p, topic) for p in marked])


def join(member: str, topics=("t",), assignor: str | None = None) -> Beat:
    return Beat(member_id=member, epoch=0, rebalance_timeout_ms=300_000, topics=tuple(topics), owned=frozenset(),
                assignor=assignor, client_id=f"client-{member}", host="10.0.0.1")


def beat(member: str, epoch: int, owned) -> Beat:
    return Beat(member_id=member, epoch=epoch, owned=owned, client_id=f"client-{member}", host="10.0.0.1")


EMPTY = GroupImage("g", 1, "uniform")


def test_a_first_member_gets_every_partition_at_the_next_group_epoch():
    image, answer = heartbeat(EMPTY, join("a"), lists(4), "uniform")
    assert (image.epoch, answer.epoch, answer.assignment) == (2, 2, tps(0, 1, 2, 3))
    assert image.members["a"].state is MemberState.STABLE and image.state() == "Stable"


def test_a_partition_moves_only_after_its_holder_reports_it_gone():
    image, _ = heartbeat(EMPTY, join("a"), lists(4), "uniform")
    image, answer = heartbeat(image, join("b"), lists(4), "uniform")
    assert image.epoch == 3 and image.target["a"] | image.target["b"] == tps(0, 1, 2, 3)
    moving = image.target["b"]
    # b is at the new epoch but gets nothing a still holds
    assert answer.epoch == 3 and answer.assignment == frozenset()
    assert image.members["b"].state is MemberState.UNRELEASED and image.state() == "Reconciling"
    # a is asked to give up b's partitions, and stays at its epoch until it has
    image, answer = heartbeat(image, beat("a", 2, tps(0, 1, 2, 3)), lists(4), "uniform")
    assert answer.epoch == 2 and answer.assignment == image.target["a"]
    assert image.members["a"].state is MemberState.UNREVOKED and image.members["a"].revoking == moving
    image, answer = heartbeat(image, beat("b", 3, frozenset()), lists(4), "uniform")
    assert answer.assignment is None  # still held by a: nothing new
    image, answer = heartbeat(image, beat("a", 2, tps(0, 1, 2, 3)), lists(4), "uniform")  # not yet
    assert image.members["a"].state is MemberState.UNREVOKED
    image, answer = heartbeat(image, beat("a", 2, image.target["a"]), lists(4), "uniform")  # let go
    assert (answer.epoch, image.members["a"].state) == (3, MemberState.STABLE)
    image, answer = heartbeat(image, beat("b", 3, frozenset()), lists(4), "uniform")
    assert answer.assignment == moving and image.state() == "Stable"


def test_a_member_that_left_frees_its_partitions_at_once():
    image, _ = heartbeat(EMPTY, join("a"), lists(2), "uniform")
    image, _ = heartbeat(image, join("b"), lists(2), "uniform")
    image, _ = heartbeat(image, beat("a", 2, tps(0, 1)), lists(2), "uniform")
    image, _ = heartbeat(image, beat("a", 2, image.target["a"]), lists(2), "uniform")
    image, _ = heartbeat(image, beat("b", 3, frozenset()), lists(2), "uniform")
    left = without(image, ["a"], "uniform")
    assert left.epoch == image.epoch + 1 and left.target == {"b": tps(0, 1)}
    left, answer = heartbeat(left, beat("b", 3, image.members["b"].assigned), lists(2), "uniform")
    assert (answer.epoch, answer.assignment) == (left.epoch, tps(0, 1))


def test_a_grow_a_shrinks_mark_and_a_retirement_each_start_an_epoch_with_lakelogs_lists():
    image, _ = heartbeat(EMPTY, join("a"), lists(4), "uniform")
    image, answer = heartbeat(image, beat("a", 2, tps(0, 1, 2, 3)), lists(6), "uniform")  # grown 4 -> 6
    assert (image.epoch, answer.assignment) == (3, tps(*range(6)))
    image, answer = heartbeat(image, beat("a", 3, tps(*range(6))), lists(6, marked=(5,)), "uniform")  # 5 marked
    assert image.epoch == 4 and image.partitions.marked == (tp(5),) and answer.assignment is None  # still a's
    image, answer = heartbeat(image, beat("a", 4, tps(*range(6))), lists(5), "uniform")  # 5 retired
    assert answer.assignment == tps(*range(5)) and image.members["a"].state is MemberState.UNREVOKED
    image, answer = heartbeat(image, beat("a", 4, tps(*range(5))), lists(5), "uniform")
    assert (answer.epoch, image.state()) == (5, "Stable")


def test_undeleted_and_marked_partitions_are_assigned_as_two_lists():
    """Rule 11: with 5 undeleted and 1 marked partition over two members, each list is balanced
    on its own, so the member given the marked one still gets its share of new data."""
    members = {m: ConsumerMember(member_id=m, topics=("t",)) for m in ("a", "b")}
    target = target_assignment(members, lists(6, marked=(5,)), "uniform", {})
    undeleted = {m: len(ps - tps(5)) for m, ps in target.items()}
    assert sorted(undeleted.values()) == [2, 3] and sum(tp(5) in ps for ps in target.values()) == 1
    ranged = target_assignment(members, lists(4), "range", {})
    assert ranged == {"a": tps(0, 1), "b": tps(2, 3)}


def test_uniform_keeps_each_members_previous_target_as_far_as_balance_allows():
    members = {m: ConsumerMember(member_id=m, topics=("t",)) for m in ("a", "b", "c")}
    before = {"a": tps(0, 3), "b": tps(1, 4), "c": tps(2, 5)}
    after = target_assignment({m: members[m] for m in ("a", "c")}, lists(6), "uniform", before)
    assert after["a"] >= tps(0, 3) and after["c"] >= tps(2, 5)


def test_the_assignor_is_the_one_most_members_name_else_the_servers():
    named = [ConsumerMember(member_id=m, assignor=a) for m, a in (("a", "range"), ("b", "range"), ("c", "uniform"))]
    assert preferred_assignor(named, "uniform") == "range"
    assert preferred_assignor([ConsumerMember(member_id="a")], "range") == "range"
    image, _ = heartbeat(EMPTY, join("a", assignor="range"), lists(2), "uniform")
    assert image.assignor == "range"


def test_heartbeat_epochs_are_checked_as_kafkas_coordinator_checks_them():
    member = ConsumerMember(member_id="a", epoch=5, previous_epoch=4, assigned=tps(0, 1))
    check_epoch(member, 5, None)
    check_epoch(member, 4, tps(0))  # the answer that moved it to 5 was lost: it holds a subset
    for received, owned in ((6, tps(0)), (4, tps(0, 2)), (4, None), (3, tps(0))):
        with pytest.raises(ConsumerGroupError) as fenced:
            check_epoch(member, received, owned)
        assert fenced.value.code == "FENCED_MEMBER_EPOCH"
    with pytest.raises(ConsumerGroupError) as unknown:
        heartbeat(EMPTY, beat("x", 3, frozenset()), lists(1), "uniform")
    assert unknown.value.code == "UNKNOWN_MEMBER_ID"


def test_a_member_rejoining_with_epoch_zero_starts_over_without_its_partitions():
    image, _ = heartbeat(EMPTY, join("a"), lists(2), "uniform")
    image, _ = heartbeat(image, join("b"), lists(2), "uniform")
    image, answer = heartbeat(image, join("a"), lists(2), "uniform")  # a was fenced and gave everything up
    assert holders(image.members.values()).get(tp(0)) != "a" or tp(0) in answer.assignment
    assert answer.epoch == image.epoch and image.members["a"].revoking == frozenset()


def test_heartbeats_that_kafka_refuses_are_refused():
    cases = [(Beat(member_id="a", epoch=0, rebalance_timeout_ms=1, topics=("t",), owned=tps(0)), "INVALID_REQUEST"),
             (Beat(member_id="a", epoch=0, rebalance_timeout_ms=1, topics=(), owned=frozenset()), "INVALID_REQUEST"),
             (Beat(member_id="a", epoch=0, topics=("t",), owned=frozenset()), "INVALID_REQUEST"),
             (Beat(member_id="", epoch=3), "INVALID_REQUEST"),
             (Beat(member_id="a", epoch=-3), "INVALID_REQUEST"),
             (Beat(member_id="a", epoch=2, regex="orders.*"), "INVALID_REQUEST"),
             (Beat(member_id="a", epoch=2, assignor="sticky"), "UNSUPPORTED_ASSIGNOR")]
    for bad, code in cases:
        with pytest.raises(ConsumerGroupError) as refused:
            validate(bad, ["uniform", "range"])
        assert refused.value.code == code, bad
    validate(join("a", assignor="range"), ["uniform", "range"])


def test_an_assignment_is_answered_to_a_full_heartbeat_or_when_it_changed():
    image, _ = heartbeat(EMPTY, join("a"), lists(2), "uniform")
    image, answer = heartbeat(image, beat("a", 2, tps(0, 1)), lists(2), "uniform")
    assert answer.assignment is None
    full = Beat(member_id="a", epoch=2, rebalance_timeout_ms=1000, topics=("t",), owned=tps(0, 1))
    assert heartbeat(image, full, lists(2), "uniform")[1].assignment == tps(0, 1)


def test_commits_are_taken_from_a_member_at_its_epoch_or_from_outside_an_empty_group():
    image, _ = heartbeat(EMPTY, join("a"), lists(1), "uniform")
    assert commit_allowed(image, "a", 2) is True
    assert commit_allowed(EMPTY, "", -1) is False and commit_allowed(None, "", -1) is False
    for member, epoch, code in (("a", 1, "STALE_MEMBER_EPOCH"), ("x", 2, "UNKNOWN_MEMBER_ID"), ("", -1, "UNKNOWN_MEMBER_ID")):
        with pytest.raises(ConsumerGroupError) as refused:
            commit_allowed(image, member, epoch)
        assert refused.value.code == code


def test_reconcile_keeps_an_unrevoked_member_until_it_reports_what_it_holds():
    member = ConsumerMember(member_id="a", epoch=2, previous_epoch=1, state=MemberState.UNREVOKED,
                            assigned=tps(0), revoking=tps(1))
    assert reconcile(member, 3, tps(0), {}, None) is member
    assert reconcile(member, 3, tps(0), {}, tps(0, 1)) is member
    moved = reconcile(member, 3, tps(0), {}, tps(0))
    assert (moved.epoch, moved.previous_epoch, moved.state) == (3, 2, MemberState.STABLE)


@pytest.mark.parametrize("seed", range(30))
def test_no_partition_is_ever_held_by_two_consumers_and_every_group_settles(seed):
    """Consumers joining, leaving, growing and shrinking topics in a random order, each consumer
    holding what its answers gave it and reporting it (a smaller answer: it still holds the rest
    until it has given them up, which its next heartbeat reports): no partition is ever held by two
    consumers, and once heartbeats go on the group settles on its target with every partition held."""
    rng = random.Random(seed)
    image = EMPTY
    held: dict[str, frozenset] = {}
    releasing: dict[str, frozenset] = {}  # what a consumer was told to give up and still holds
    epochs: dict[str, int] = {}
    count, marked = 4, ()
    names = iter(f"m{i}" for i in range(100))

    def send(member: str, request: Beat) -> None:
        nonlocal image
        image, answer = heartbeat(image, request, lists(count, marked), rng.choice(["uniform", "range"]))
        epochs[member] = answer.epoch
        if answer.assignment is not None:
            releasing[member] = held[member] - answer.assignment
            held[member] = answer.assignment
        holders_of: dict[TopicPartition, str] = {}
        for m, ps in held.items():
            for p in ps | releasing.get(m, frozenset()):
                assert p not in holders_of, f"{p} held by {holders_of[p]} and {m}"
                holders_of[p] = m

    for _step in range(120):
        action = rng.random()
        if action < 0.15 and len(held) < 5:
            member = next(names)
            held[member] = frozenset()
            send(member, join(member, assignor=rng.choice([None, "uniform", "range"])))
        elif action < 0.22 and len(held) > 1:
            member = rng.choice(sorted(held))
            image = without(image, [member], "uniform")  # left (its client gave everything up first)
            del held[member], epochs[member]
            releasing.pop(member, None)
        elif action < 0.27:
            count = rng.choice([4, 5, 6, 7]) if not marked else count
            marked = tuple(p for p in range(count) if rng.random() < 0.2) if rng.random() < 0.5 else ()
        elif held:
            member = rng.choice(sorted(held))
            releasing.pop(member, None)  # given up: this heartbeat says so
            send(member, beat(member, epochs[member], held[member]))
    for _round in range(4 * len(held) + 4):
        for member in sorted(held):
            releasing.pop(member, None)
            send(member, beat(member, epochs[member], held[member]))
    if held:
        assert image.state() == "Stable"
        assert frozenset().union(*held.values()) == lists(count, marked).all()


def test_an_empty_regex_beside_topic_names_is_no_regex_subscription():
    # proves: librdkafka's KIP-848 consumer sends SubscribedTopicRegex "" with its topic names on
    # joining (Kafka's broker counts an empty regex as none); refused, its consumer could not join
    validate(Beat(member_id="a", epoch=0, rebalance_timeout_ms=300_000, topics=("t",), regex="", owned=frozenset()),
             ["uniform"])
    with pytest.raises(ConsumerGroupError) as refused:
        validate(Beat(member_id="a", epoch=0, rebalance_timeout_ms=1, topics=(), regex="", owned=frozenset()), ["uniform"])
    assert refused.value.code == "INVALID_REQUEST"  # neither names nor a regex
