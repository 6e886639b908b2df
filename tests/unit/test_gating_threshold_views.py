"""A resize's threshold read after key compaction removed the last records before the bump, by
a gate other than the one of the member still delivering them (``pipelines.gating.OffsetGate``),
while that member plans its batches (a Kafka client's fetch is served) on the snapshot it took
before, which still holds them: every gate takes the log end the bump's commit recorded
(``LogSnapshot.end_of_epoch``), never the largest offset the log still holds there."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from log_store.log_metadata import LogSnapshot, TopicLogMetadata
from pipelines.gating import Barrier, OffsetGate


class _Log:
    """Partition 1's records (offset, epoch) as the newest log version holds them."""

    def __init__(self) -> None:
        # grow 4 -> 6 bumped partition 1 from epoch 1: offsets 26..29 before it, 30 after
        self.rows = {1: [(26, 1), (27, 1), (28, 1), (29, 1), (30, 2)]}

    def last_offset_of_epoch(self, partition: int, epoch: int) -> int:
        return max((o for o, e in self.rows.get(partition, []) if e <= epoch), default=-1)

    def compact(self, partition: int, removed: set[int]) -> None:
        self.rows[partition] = [(o, e) for o, e in self.rows[partition] if o not in removed]


class _Group:
    def __init__(self, committed: dict[int, int]) -> None:
        self.positions = committed

    def committed(self) -> dict[int, int]:
        return dict(self.positions)

    def published(self) -> dict[int, int]:
        return {}

    def keys_opened(self, partitions: list[int]) -> None:
        pass


# the grow's commit raised every partition's epoch from 1 to 2 and recorded their log ends then
SNAP = LogSnapshot(version=9, topic_version=3, metadata=TopicLogMetadata(topic="t", undeleted_partition_count=6,
                                                                         partitions={}),
                   log_ends={}, epoch_ends={p: ((1, 2, end),) for p, end in {0: 57, 1: 30, 2: 18, 3: 11}.items()})
UNRECORDED = SNAP.model_copy(update={"epoch_ends": {}})  # a log bumped by an earlier release


def _gate(log: _Log, group: _Group) -> OffsetGate:
    gate = OffsetGate(None, log, "t", "g", group)
    gate.barriers = lambda version: [Barrier(version=3, before={0: 1, 1: 1, 2: 1, 3: 1})]
    return gate


def test_a_threshold_first_read_after_compaction_does_not_pass_a_barrier_a_member_still_delivers_before():
    log, group = _Log(), _Group({0: 57, 1: 28, 2: 18, 3: 11})  # the group delivered p1 up to 27
    a = _gate(log, group)  # the member owning p1: reads the threshold before the compaction
    assert a.limits({1: 28}, SNAP) == {1: 30}  # plans [28, 30) on its snapshot: k3's records at 28, 29
    log.compact(1, {28, 29})  # k3 moved to p4 at the grow; its record there supersedes 28 and 29
    b = _gate(log, group)  # another member's gate, first asked now (a restarted process, a new server)
    assert b.limits({4: 0, 5: 0}, SNAP) == {4: 0, 5: 0}, \
        "p4 (k3's post-resize record) held until the group is past p1's pre-resize offsets (29)"


def test_a_fetch_held_while_it_is_read_does_not_stop_a_threshold_read_after_compaction_passing_a_barrier():
    from serve.gates import _Committed
    from serve.held import ServedRecords

    log = _Log()
    log.compact(1, {28, 29})
    records = SimpleNamespace(committed=lambda group: {("t", p): (o, -1) for p, o in {0: 57, 1: 28, 2: 18, 3: 11}.items()})
    reads = SimpleNamespace(past_gaps=dict, location="loc")
    served = ServedRecords()
    gate = OffsetGate(None, log, "t", "g", _Committed(records, "g", "t", reads, served), own_delivered=False)
    gate.barriers = lambda version: [Barrier(version=3, before={0: 1, 1: 1, 2: 1, 3: 1})]
    with served.reading(("c1", "h"), {"t": ["g"]}).fetching({"t": {1: 28}}):  # m1's fetch, on the older view
        assert gate.limits({4: 0, 5: 0}, SNAP) == {4: 0, 5: 0}


def test_a_bump_records_the_log_end_its_epochs_end_at():
    """``epoch_raised``: a commit raising a partition's epoch records the log end then; a rise of
    several epochs at once (records applied together) ends each of them there; a partition new to
    the log, or whose epoch stays, records nothing; an earlier rise no end was recorded for
    (an earlier release) answers None, and the gate reads the records the log holds."""
    from log_store.log_metadata import PartitionMetadata, epoch_ends_of, epoch_raised
    from log_store.names import log_end_app_id

    def meta(epochs: dict[int, int]) -> TopicLogMetadata:
        return TopicLogMetadata(topic="t", undeleted_partition_count=len(epochs),
                                partitions={p: PartitionMetadata(partition=p, leader_epoch=e) for p, e in epochs.items()})

    conf = meta({0: 1, 1: 4}).to_properties()
    known = {log_end_app_id(0): 30, log_end_app_id(1): 12}
    for wanted, end in ((meta({0: 2, 1: 4, 2: 0}), 30),  # a grow: 0 bumped, 1 kept, 2 new
                        (meta({0: 4, 1: 5, 2: 0}), 41)):  # two records applied at once on 0
        known[log_end_app_id(0)] = end
        conf |= wanted.to_properties() | epoch_raised(conf, wanted, known)
    assert conf["lakelog.partition.0.epoch_ends"] == "1-2:30,2-4:41"
    snap = SNAP.model_copy(update={"epoch_ends": epoch_ends_of(conf, [0, 1, 2])})
    assert [snap.end_of_epoch(0, e) for e in range(5)] == [None, 30, 41, 41, None]
    assert [snap.end_of_epoch(1, e) for e in (3, 4, 5)] == [None, 12, None]  # 3 -> 4 by an earlier release
    assert snap.epoch_ends.keys() == {0, 1}
    assert TopicLogMetadata.from_properties(conf) == meta({0: 4, 1: 5, 2: 0})


def test_a_bump_no_end_was_recorded_for_reads_the_largest_offset_the_log_holds():
    log, group = _Log(), _Group({0: 57, 1: 28, 2: 18, 3: 11})
    assert _gate(log, group).limits({1: 28}, UNRECORDED) == {1: 30}
    log.compact(1, {29})
    assert _gate(log, group).limits({1: 28}, UNRECORDED) == {1: 29}  # the limit of an earlier release
