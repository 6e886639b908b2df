"""The member's state machine (control_plane.group.lifecycle) from hand-made group images, no Spark.

Every transition in ``TRANSITIONS`` has a scenario here that takes it (the parametrized test
fails when the table gains a transition without one), and moves the table does not allow raise.
"""

from __future__ import annotations

import pytest

from control_plane.group.image import GroupImage
from control_plane.group.lifecycle import (
    TRANSITIONS,
    Acquire,
    Adopt,
    Beat,
    IllegalTransition,
    Join,
    Lead,
    Lose,
    MemberView,
    Phase,
    Revoke,
    step,
)
from control_plane.records import (
    GenerationMember,
    GenerationRecord,
    Handover,
    MemberAssignment,
    MemberHeartbeat,
    MemberState,
    TopicPartition,
)
from control_plane.settings import GroupSettings

T = "t"
SETTINGS = GroupSettings(rebalance_timeout_ms=10_000)


def tp(p: int) -> TopicPartition:
    return TopicPartition(topic=T, partition=p)


def gen(n: int, assignment: dict[str, list[int]], protocol: str = "eager", handovers=(), warmups=None,
        partitions: int | None = None) -> GenerationRecord:
    parts = sorted({p for ps in assignment.values() for p in ps}) if partitions is None else list(range(partitions))
    return GenerationRecord(
        group="g", generation=n, protocol=protocol, assignor="range", leader=min(assignment),
        members=[GenerationMember(member_id=m, protocol=protocol, topics=[T]) for m in assignment],
        assignment=[MemberAssignment(member_id=m, partitions=[tp(p) for p in ps],
                                     warmups=[tp(p) for p in (warmups or {}).get(m, [])]) for m, ps in assignment.items()],
        partitions=[tp(p) for p in parts], handovers=list(handovers))


def beat(member: str, generation: int, joining: int | None = None) -> MemberHeartbeat:
    return MemberHeartbeat(group="g", member_id=member, state=MemberState.JOINING if joining else MemberState.STABLE,
                           generation=generation, joining=joining)


def image(generation: GenerationRecord | None, *live: MemberHeartbeat, now: float = 100.0, lists=None,
          revocations=None, due: bool = False) -> GroupImage:
    return GroupImage(group="g", generation=generation, live={b.member_id: b for b in live}, partition_lists=lists,
                      revocations=revocations or {}, now=now, heartbeat_due=due)


def member(phase: Phase = Phase.UNJOINED, protocol: str = "eager", member_id: str = "a", **kw) -> MemberView:
    return MemberView(member_id=member_id, protocol=protocol, phase=phase, **kw)


def kinds(s) -> list[type]:
    return [type(a) for a in s.actions]


def phase_after(s, kind: type) -> Phase:
    """The member's phase once the step's first ``kind`` action landed (a step can go on from there:
    a member that lost its partitions rejoins in the same poll)."""
    return next(after.phase for action, after in s.moves if isinstance(action, kind))


# -- one scenario per transition ------------------------------------------------------------------
def unjoined_to_joining():
    """A new member of an empty group joins generation 1 and, alone, leads it."""
    s = step(member(), image(None), SETTINGS)
    assert s.reason == "first member" and kinds(s) == [Join, Lead] and s.member.target == 1
    return Phase.UNJOINED, s.member.phase


def joining_to_joining():
    """Another member asked for a higher generation: join that one instead."""
    m = member(Phase.JOINING, target=3, joined_at=90.0, generation=2)
    s = step(m, image(gen(2, {"a": [0], "b": [1]}), beat("b", 2, joining=4)), SETTINGS)
    assert s.member.target == 4 and Join(4) in s.actions
    return Phase.JOINING, s.member.phase


def joining_to_stable():
    m = member(Phase.JOINING, target=1)
    s = step(m, image(gen(1, {"a": [0, 1]})), SETTINGS)
    [adopt] = s.actions
    assert isinstance(adopt, Adopt) and adopt.claim == [tp(0), tp(1)] and s.member.owned == {tp(0), tp(1)}
    assert s.member.generation == 1 and s.member.rebalances == 1
    return Phase.JOINING, s.member.phase


def joining_to_awaiting_handover():
    """A partition handed over from b: claimed once b has revoked it, not at adoption."""
    m = member(Phase.JOINING, protocol="cooperative", target=3, generation=2, owned=frozenset({tp(0)}))
    g = gen(3, {"a": [0, 1], "b": [2]}, "cooperative",
            handovers=[Handover(topic=T, partition=1, from_member="b", to_member="a")])
    s = step(m, image(g, beat("b", 3)), SETTINGS)
    assert isinstance(s.actions[0], Adopt) and s.actions[0].claim == [] and s.actions[0].kept == [tp(0)]
    assert s.member.pending_partitions == {tp(1)} and tp(1) not in s.member.owned
    return Phase.JOINING, s.member.phase


def joining_to_follow_up():
    """A cooperative member gives up a partition the generation withholds: it asks for a follow-up."""
    m = member(Phase.JOINING, protocol="cooperative", target=3, generation=2, owned=frozenset({tp(0), tp(1)}))
    s = step(m, image(gen(3, {"a": [0], "b": [2]}, "cooperative"), beat("b", 3)), SETTINGS)
    assert s.actions[0].gone == [tp(1)] and s.member.owned == {tp(0)}
    assert kinds(s)[1] is Join, "and rejoins in the same poll to hand it over"
    return Phase.JOINING, phase_after(s, Adopt)


def joining_to_unjoined():
    """A generation formed without the member while it was joining: its partitions are lost."""
    m = member(Phase.JOINING, protocol="cooperative", target=3, generation=2, owned=frozenset({tp(0)}))
    s = step(m, image(gen(3, {"b": [0, 1]}), beat("b", 3)), SETTINGS)
    assert s.actions[0] == Lose([tp(0)], "generation 3 was formed without this member")
    assert s.member.owned == frozenset() and s.member.generation == 0
    return Phase.JOINING, phase_after(s, Lose)


def joining_to_left():
    return Phase.JOINING, member(Phase.JOINING, target=1).to(Phase.LEFT).phase


def stable_to_joining():
    """A new member appears: an eager member revokes everything, then joins."""
    m = member(Phase.STABLE, generation=1, owned=frozenset({tp(0), tp(1)}))
    s = step(m, image(gen(1, {"a": [0, 1]}), beat("b", 0, joining=2)), SETTINGS)
    assert s.reason.startswith("members changed") and kinds(s)[:2] == [Revoke, Join]
    assert s.actions[0] == Revoke([tp(0), tp(1)], 1) and s.member.owned == frozenset()
    return Phase.STABLE, s.member.phase


def stable_to_unjoined():
    m = member(Phase.STABLE, generation=1, owned=frozenset({tp(0)}))
    s = step(m, image(gen(2, {"b": [0]}), beat("b", 2)), SETTINGS)
    assert isinstance(s.actions[0], Lose)
    return Phase.STABLE, phase_after(s, Lose)


def stable_to_left():
    return Phase.STABLE, member(Phase.STABLE, generation=1).to(Phase.LEFT).phase


def awaiting_to_stable():
    """b revoked the partition in this generation: claim it."""
    h = Handover(topic=T, partition=1, from_member="b", to_member="a")
    m = member(Phase.AWAITING_HANDOVER, protocol="cooperative", generation=3, owned=frozenset({tp(0)}), pending=(h,))
    g = gen(3, {"a": [0, 1], "b": [2]}, "cooperative", handovers=[h])
    waiting = step(m, image(g, beat("b", 3), revocations={tp(1): (("b", 2),)}), SETTINGS)
    assert waiting.member.phase is Phase.AWAITING_HANDOVER and waiting.actions == [], "a revocation of an older generation"
    s = step(m, image(g, beat("b", 3), revocations={tp(1): (("b", 3),)}), SETTINGS)
    assert s.actions == [Acquire([tp(1)], 3)] and s.member.owned == {tp(0), tp(1)} and not s.member.pending
    return Phase.AWAITING_HANDOVER, s.member.phase


def awaiting_to_joining():
    h = Handover(topic=T, partition=1, from_member="b", to_member="a")
    m = member(Phase.AWAITING_HANDOVER, protocol="cooperative", generation=3, owned=frozenset({tp(0)}), pending=(h,))
    s = step(m, image(gen(3, {"a": [0, 1], "b": [2]}, "cooperative", handovers=[h]), beat("b", 3), beat("c", 0, 4)),
             SETTINGS)
    assert kinds(s) == [Join] and s.member.owned == {tp(0)}, "a cooperative member keeps what it owns"
    return Phase.AWAITING_HANDOVER, s.member.phase


def awaiting_to_unjoined():
    h = Handover(topic=T, partition=1, from_member="b", to_member="a")
    m = member(Phase.AWAITING_HANDOVER, protocol="cooperative", generation=3, owned=frozenset({tp(0)}), pending=(h,))
    s = step(m, image(gen(4, {"b": [0, 1, 2]}), beat("b", 4)), SETTINGS)
    assert s.actions[0] == Lose([tp(0), tp(1)], "generation 4 was formed without this member")
    return Phase.AWAITING_HANDOVER, phase_after(s, Lose)


def awaiting_to_left():
    return Phase.AWAITING_HANDOVER, member(Phase.AWAITING_HANDOVER, generation=1).to(Phase.LEFT).phase


def follow_up_to_joining():
    m = member(Phase.FOLLOW_UP, protocol="cooperative", generation=3, owned=frozenset({tp(0)}))
    s = step(m, image(gen(3, {"a": [0], "b": [2]}, "cooperative", partitions=3), beat("b", 3)), SETTINGS)
    assert s.reason == "follow-up: hand over revoked partitions" and kinds(s)[0] is Join
    return Phase.FOLLOW_UP, s.member.phase


def follow_up_to_unjoined():
    m = member(Phase.FOLLOW_UP, protocol="cooperative", generation=3, owned=frozenset({tp(0)}))
    s = step(m, image(gen(4, {"b": [0, 2]}), beat("b", 4)), SETTINGS)
    assert isinstance(s.actions[0], Lose)
    return Phase.FOLLOW_UP, phase_after(s, Lose)


def follow_up_to_left():
    return Phase.FOLLOW_UP, member(Phase.FOLLOW_UP, generation=1).to(Phase.LEFT).phase


def unjoined_to_left():
    return Phase.UNJOINED, member().to(Phase.LEFT).phase


SCENARIOS = [unjoined_to_joining, unjoined_to_left, joining_to_joining, joining_to_stable, joining_to_awaiting_handover,
             joining_to_follow_up, joining_to_unjoined, joining_to_left, stable_to_joining, stable_to_unjoined,
             stable_to_left, awaiting_to_stable, awaiting_to_joining, awaiting_to_unjoined, awaiting_to_left,
             follow_up_to_joining, follow_up_to_unjoined, follow_up_to_left]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
def test_each_scenario_takes_its_transition(scenario):
    source, target = scenario()
    assert scenario.__name__.split("_to_")[1].startswith(target.value.split("_")[0]), (scenario.__name__, target)
    assert target in TRANSITIONS[source]


def test_every_transition_in_the_table_has_a_scenario():
    taken = {scenario() for scenario in SCENARIOS}
    table = {(a, b) for a, bs in TRANSITIONS.items() for b in bs}
    assert table == taken, f"untested: {sorted(table - taken)}; not in the table: {sorted(taken - table)}"


@pytest.mark.parametrize("source,target", [(Phase.LEFT, Phase.JOINING), (Phase.UNJOINED, Phase.STABLE),
                                           (Phase.STABLE, Phase.FOLLOW_UP), (Phase.FOLLOW_UP, Phase.STABLE)])
def test_a_move_the_table_does_not_allow_raises(source, target):
    with pytest.raises(IllegalTransition):
        member(source).to(target)


# -- the rules between transitions --------------------------------------------------------------------
def test_a_stable_member_with_nothing_to_do_heartbeats_when_one_is_due():
    m = member(Phase.STABLE, generation=1, owned=frozenset({tp(0)}))
    g = gen(1, {"a": [0]})
    assert step(m, image(g), SETTINGS).actions == []
    assert step(m, image(g, due=True), SETTINGS).actions == [Beat()]


def test_the_member_with_the_smallest_id_leads_once_every_live_member_joined_or_the_timeout_passed():
    g = gen(1, {"a": [0], "b": [1]})
    a = member(Phase.JOINING, target=2, generation=1, joined_at=95.0)
    waiting = step(a, image(g, beat("b", 1)), SETTINGS)  # b has not joined 2 yet
    assert not any(isinstance(x, Lead) for x in waiting.actions)
    b_joined = beat("b", 1, joining=2)
    led = step(a, image(g, b_joined), SETTINGS)
    assert [x for x in led.actions if isinstance(x, Lead)] == [Lead(2, [b_joined], led.reason, 5000)]
    late = step(a, image(g, beat("b", 1), now=95.0 + SETTINGS.rebalance_timeout_ms / 1000), SETTINGS)
    assert any(isinstance(x, Lead) for x in late.actions), "the rebalance timed out: lead with who joined"
    b = member(Phase.JOINING, target=2, generation=1, member_id="b")
    assert not any(isinstance(x, Lead) for x in step(b, image(g, beat("a", 1, joining=2)), SETTINGS).actions)


def test_an_eager_member_adopts_then_rejoins_in_one_poll_without_keeping_what_it_gave_up():
    """Seed 4's shape: adopt generation N, then rejoin for N+1 in the same poll; what it adopted
    is revoked again before it joins."""
    m = member(Phase.JOINING, target=2, generation=1)
    s = step(m, image(gen(2, {"a": [0, 1]}), beat("c", 0, joining=3)), SETTINGS)
    assert kinds(s)[:3] == [Adopt, Revoke, Join] and s.member.owned == frozenset() and s.member.target == 3


def test_a_member_that_lost_its_partitions_rejoins_even_if_the_generation_names_it():
    m = member(Phase.UNJOINED)
    s = step(m, image(gen(2, {"a": [0], "b": [1]}), beat("b", 2)), SETTINGS)
    assert s.reason == "member a rejoins after losing its partitions" and Join(3) in s.actions


def test_changed_partition_lists_and_caught_up_warm_copies_are_reasons_to_rejoin():
    m = member(Phase.STABLE, protocol="cooperative", generation=1, owned=frozenset({tp(0)}))
    g = gen(1, {"a": [0]}, "cooperative")
    assert step(m, image(g, lists=([tp(0), tp(1)], [])), SETTINGS).reason == "topic partitions changed"
    warm = member(Phase.STABLE, protocol="cooperative", generation=1, owned=frozenset({tp(0)}),
                  warm=frozenset({tp(1)}), warm_ready=frozenset({tp(1)}))
    assert step(warm, image(g), SETTINGS).reason == "warm-up copies caught up"


def test_a_member_that_left_does_nothing():
    assert step(member(Phase.LEFT), image(None), SETTINGS).actions == []
