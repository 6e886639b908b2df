"""Key compaction's topic-wide rule without Spark (``log_store.key_order`` with
``cleaning.survivors``): a key's records in several partitions, ordered by the resizes between
them as the gates deliver them, against the topic's history as the controller plans it."""

from datetime import datetime

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
import pyarrow.compute as pc

from control_plane.controller.rules import plan_expand, plan_retire, plan_shrink
from control_plane.image import TopicImage
from control_plane.records import PartitionState, TopicEvent, TopicRecord
from log_store.cleaning import survivors
from log_store.key_order import elsewhere, eras
from log_store.log_files import DataFile
from log_store.log_metadata import Mode
from log_store.partitioner import partition_for

NOW = datetime(2026, 1, 1)
DAY = 86_400_000


def history(*counts: int) -> list[TopicRecord]:
    """A topic of ``counts[0]`` partitions resized to each following count in turn."""
    rs = [TopicRecord(topic="t", topic_version=1, event=TopicEvent.CREATE, location="/x", partition_count=counts[0],
                      undeleted_partition_count=counts[0],
                      partitions=[PartitionState(partition=p) for p in range(counts[0])])]
    for n in counts[1:]:
        rs.append((plan_expand if n > rs[-1].undeleted_partition_count else plan_shrink)(rs[-1], n, NOW))
    return rs


def clean(records, barriers, now_ms=0, cleaned_at=None):
    """Each partition cleaned as one file against the whole topic: the surviving (partition, offset)."""
    t = pa.table({"partition": pa.array([r[0] for r in records], pa.int32()),
                  "offset": pa.array([r[1] for r in records], pa.int64()),
                  "key": pa.array([r[2] for r in records], pa.binary()),
                  "leader_epoch": pa.array([r[3] for r in records], pa.int32()),
                  "value": pa.array([r[4] for r in records], pa.binary())})
    era = eras(t.column("partition"), t.column("leader_epoch"), barriers)
    index = t.select(["partition", "offset", "key"]).append_column("era", era)
    kept = []
    for p in sorted(set(t.column("partition").to_pylist())):
        mask = pc.equal(t.column("partition"), p)
        rows = t.filter(mask).append_column("era", era.filter(mask))
        offsets = rows.column("offset").to_pylist()
        f = DataFile(path=f"p{p}", partition=p, size=1, records=len(offsets), first=offsets[0], last=offsets[-1],
                     cleaned_at_ms=cleaned_at, tombstones=None if cleaned_at is None else 1)
        later, earlier = elsewhere(rows, p, index)
        keep = survivors(rows, [f], now_ms, 0, later, earlier).to_pylist()
        kept += [(p, o) for o, k in zip(offsets, keep) if k]
    return kept


def test_eras_follow_the_barriers_of_a_grow_a_shrink_and_a_reused_number():
    rs = history(2, 4, 3)
    rs.append(plan_retire(rs[-1], {3: 5}, NOW))
    rs.append(plan_expand(rs[-1], 4, NOW))  # number 3 again, its epochs continuing
    barriers = TopicImage("t", rs).barriers()
    parts = pa.array([0, 0, 0, 0, 2, 2, 2, 3, 3], pa.int32())
    epochs = pa.array([0, 1, 2, 3, 0, 1, 2, 1, 2], pa.int32())
    assert eras(parts, epochs, barriers).to_pylist() == [0, 1, 2, 3, 1, 2, 3, 3, 3], \
        "epochs bumped by each resize; a number reused after its retirement is of the resize that made it again"


def test_a_record_of_a_later_era_in_another_partition_supersedes_and_holds_back_the_tombstone():
    barriers = TopicImage("t", history(1, 2)).barriers()  # k in partition 0, then (grow) in 1
    before = [(0, 0, b"k", 0, b"v1"), (0, 1, b"s", 0, b"x"), (1, 0, b"k", 0, None)]
    assert clean(before, barriers) == [(0, 1), (1, 0)], "v1 goes: the tombstone after the grow is later"
    assert clean(before, barriers, now_ms=1, cleaned_at=0) == [(0, 1), (1, 0)], \
        "the tombstone past its horizon stays while v1 is in partition 0"
    after = [(0, 1, b"s", 0, b"x"), (1, 0, b"k", 0, None)]
    assert clean(after, barriers, now_ms=1, cleaned_at=0) == [(0, 1)], "then it goes as usual"


def test_grow_then_shrink_a_key_moving_back_to_its_first_partition():
    barriers = TopicImage("t", history(1, 2, 1)).barriers()  # k: partition 0, then 1 (grow), 0 again (shrink)
    records = [(0, 0, b"k", 0, b"v1"), (0, 1, b"s", 1, b"x"), (1, 0, b"k", 0, b"v2"), (0, 2, b"k", 2, b"v3")]
    assert clean(records, barriers) == [(0, 1), (0, 2)], \
        "v1 superseded in its partition, v2 in partition 1 by v3 after the shrink, v3 the latest"
    tomb = [(0, 0, b"k", 0, b"v1"), (1, 0, b"k", 0, b"v2"), (0, 1, b"k", 2, None)]
    assert clean(tomb, barriers, now_ms=1, cleaned_at=0) == [(0, 1)], \
        "the tombstone stays while v2 of an earlier era is in partition 1, and v2 goes"
    assert clean([(0, 1, b"k", 2, None)], barriers, now_ms=1, cleaned_at=0) == []
    back = [(0, 0, b"k", 0, b"v1"), (1, 0, b"k", 0, b"v2")]
    assert clean(back, barriers) == [(1, 0)], "v2 of partition 1 after the grow supersedes v1 before it"


def test_records_of_one_era_in_two_partitions_keep_the_per_partition_rule():
    barriers = TopicImage("t", history(1, 2)).barriers()
    placed = [(0, 5, b"k", 1, b"a"), (1, 0, b"k", 0, None)]  # a producer chose partition 0 after the grow
    assert clean(placed, barriers, now_ms=1, cleaned_at=0) == [(0, 5)], "no order between them: Kafka's rule"
    assert clean(placed, []) == [(0, 5), (1, 0)], "a log never resized: per partition"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=5), st.data())
def test_each_key_keeps_exactly_its_latest_record_in_delivery_order_across_resizes(counts, data):
    """Records produced between resizes by the partitioner, every partition cleaned against the
    topic: of each key only the record produced last survives (a shrink's marked partitions stay
    readable until a grow retires them, their records then gone)."""
    rs = history(3)
    records, ends = [], {}  # (partition, offset, key, epoch, value), and when each was produced
    produced = {}
    for n in counts:
        marked = [p.partition for p in rs[-1].partitions if p.mode is Mode.READ_ONLY]
        if n > rs[-1].undeleted_partition_count and marked:
            rs.append(plan_retire(rs[-1], {m: ends.get(m, 0) for m in marked}, NOW))
            records = [r for r in records if r[0] not in marked]
        if n != rs[-1].undeleted_partition_count:
            rs.append((plan_expand if n > rs[-1].undeleted_partition_count else plan_shrink)(rs[-1], n, NOW))
        epochs = {p.partition: p.leader_epoch for p in rs[-1].partitions}
        for key in data.draw(st.lists(st.sampled_from([b"a", b"b", b"c", b"d", b"e"]), max_size=5)):
            p = partition_for(key, rs[-1].undeleted_partition_count)
            records.append((p, ends.get(p, 0), key, epochs[p], b"v"))
            produced[(p, ends.get(p, 0))] = len(produced)
            ends[p] = ends.get(p, 0) + 1
    last = {}
    for p, o, key, _e, _v in records:
        if produced[(p, o)] > produced.get(last.get(key), -1):
            last[key] = (p, o)
    kept = clean(records, TopicImage("t", rs).barriers()) if records else []
    assert sorted(kept) == sorted(last.values())
