"""A resize's recorded threshold across a leader election of a replicated topic: the old
leader's metadata commit recorded the log end at the rise (``epoch_raised``); a follower that had
not yet copied that commit, once elected, applies the resize and the election in one commit
(``replication.election._lead`` -> ``metadata_change``) and records its own, lower, log end for
the same epoch (the old leader unreachable, so no handover copy brought the commit over, and its
records past the follower's end, taken with ``acks: 1``, are lost). A member's gate follows the
election to the new leader's log (``Consumer.snapshot`` swaps ``gate.log``; a stream's planner
keeps one gate per topic): it must judge by the end the new log recorded, as a gate started there
does, not by the one it read at the old leader."""

from __future__ import annotations

from log_store.log_metadata import LogSnapshot, PartitionMetadata, TopicLogMetadata, epoch_raised, epoch_ends_of
from log_store.names import log_end_app_id
from pipelines.gating import Barrier, OffsetGate


def _meta(epoch: int) -> TopicLogMetadata:
    return TopicLogMetadata(topic="t", undeleted_partition_count=2,
                            partitions={0: PartitionMetadata(partition=0, leader_epoch=epoch),
                                        1: PartitionMetadata(partition=1)})


def _snap(conf: dict[str, str]) -> LogSnapshot:
    return LogSnapshot(version=5, topic_version=3, metadata=_meta(3), log_ends={},
                       epoch_ends=epoch_ends_of(conf, [0]))


class _Log:
    def __init__(self, snap: LogSnapshot) -> None:
        self.snap = snap

    def snapshot(self) -> LogSnapshot:
        return self.snap

    def last_offset_of_epoch(self, partition: int, epoch: int) -> int:
        raise AssertionError("every rise here was recorded")


class _Group:
    def committed(self) -> dict[int, int]:
        return {}

    def published(self) -> dict[int, int]:
        return {}

    def keys_opened(self, partitions: list[int]) -> None:
        pass


def _gate(snap: LogSnapshot) -> OffsetGate:
    """A gate on a resize that bumped partition 0 from epoch 1 and made partition 1."""
    gate = OffsetGate(None, _Log(snap), "t", "g", _Group())
    gate.barriers = lambda version: [Barrier(version=2, before={0: 1})]
    return gate


def _logs() -> tuple[LogSnapshot, LogSnapshot]:
    conf = {**TopicLogMetadata(topic="t", undeleted_partition_count=1,
                               partitions={0: PartitionMetadata(partition=0, leader_epoch=1)}).to_properties(),
            "lakelog.topic_version": "1"}
    # the old leader applies the resize (epoch 1 -> 2) at log end 30
    leader = conf | epoch_raised(conf, _meta(2), {log_end_app_id(0): 30})
    # the follower copied up to offset 27 of epoch 1, not the resize's commit; elected, it applies
    # the resize and the election (epoch 1 -> 3) in one commit
    follower = conf | epoch_raised(conf, _meta(3), {log_end_app_id(0): 27})
    return _snap(leader), _snap(follower)


def test_a_gate_that_followed_an_election_takes_the_threshold_the_new_leader_recorded():
    old, new = _logs()
    gate = _gate(old)
    assert gate.threshold(0, 1) == 29
    gate.log = _Log(new)  # the election moved the topic: the gate follows it
    assert gate.threshold(0, 1) == _gate(new).threshold(0, 1) == 26


def test_a_gate_that_followed_an_election_holds_the_new_epochs_records_and_opens_past_the_old_ones():
    """At the new leader, offsets 27.. of partition 0 hold records of the new epoch: held until the
    group is past offset 26 (order), and then the barrier passes (liveness), though the old leader
    had recorded 30."""
    old, new = _logs()
    gate = _gate(old)
    assert gate.limits({0: 25, 1: 0}, old) == {0: 30, 1: 0}
    gate.log = _Log(new)
    assert gate.limits({0: 25, 1: 0}, new) == {0: 27, 1: 0}
    assert gate.limits({0: 27, 1: 0}, new) == {}
