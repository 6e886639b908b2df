"""A poll that assigns a partition and then gives it up must leave the consumer without it.

Found by the campaign (seeds 4 and 8): an eager member adopted generation N (assigned), then in
the same poll rejoined for N+1 (revoked); the consumer applies revocations before assignments,
kept the partition's position and delivered a batch it did not own.
"""

from types import SimpleNamespace

from control_plane.group.listener import RebalanceListener

from control_plane.group.state import MembershipChange
from control_plane.records import TopicPartition
from pipelines.group_consumer import GroupConsumer
from pipelines.member_positions import MemberPositions

T = "t"


def tp(p: int) -> TopicPartition:
    return TopicPartition(topic=T, partition=p)


def _consumer(positions: dict[int, int]):
    """The parts of a GroupConsumer that ``_apply`` touches, without Spark."""
    held = MemberPositions(owned=dict(positions))
    stub = SimpleNamespace(
        held=held, positions=held.owned, topic=T, listener=RebalanceListener(), _commit_due=False,
        _publish=lambda: None,
        member=SimpleNamespace(warm=set(), last_generation=None, generation=1),
        consumer=SimpleNamespace(positions=lambda sink, planned_at=None, owned=(), waiting=None: {}, sink_ahead={},
                                 forget=lambda ps: None,
                                 gate=SimpleNamespace(limits=lambda fresh: {})),
        _tp=tp,
    )
    stub._start = lambda starts, waiting=frozenset(): GroupConsumer._start(stub, starts, waiting)
    return stub


def test_assigned_then_revoked_in_one_poll_leaves_no_position():
    change = MembershipChange(generation=1)
    change.assigned.extend([tp(0), tp(1), tp(2)])
    change.given_up([tp(0), tp(1), tp(2)])  # the same poll rejoins eagerly
    consumer = _consumer({})
    GroupConsumer._apply(consumer, change, None)
    assert consumer.positions == {}


def test_assigned_then_lost_and_reassigned_keeps_only_what_is_owned():
    change = MembershipChange(generation=1)
    change.assigned.extend([tp(0), tp(1)])
    change.given_up([tp(0), tp(1)], lost=True)
    change.assigned.append(tp(1))  # claimed again later in the same poll
    consumer = _consumer({5: 9})
    GroupConsumer._apply(consumer, change, None)
    assert set(consumer.positions) == {1, 5}
    assert change.lost == [tp(0), tp(1)] and change.assigned == [tp(1)]


def test_revoked_then_assigned_in_one_poll_keeps_the_new_assignment():
    change = MembershipChange(generation=2)
    change.given_up([tp(0)])
    change.assigned.append(tp(0))  # an eager member's next generation gives it back
    consumer = _consumer({0: 7})
    GroupConsumer._apply(consumer, change, None)
    assert consumer.positions == {0: 0}
