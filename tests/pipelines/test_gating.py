"""Consumer gating across a grow and a shrink (rules 8-9), in one process.

A consumer that reads small batches spread over all partitions would deliver a key's new
records (in a new partition, or past the upper threshold) before its old ones; the gates stop
that. The same run with gating switched off must break per-key order, which shows the check
here can catch a violation.
"""

from __future__ import annotations

import pytest

from control_plane.controller import TopicController
from control_plane.topics import TopicAdmin
from control_plane.settings import ControllerSettings
from pipelines.settings import ConsumerSettings
from pipelines.consumer import Consumer
from pipelines.producer import Producer
from tests.support import make_records

T = "gated"


def order_violations(spark, sink: str) -> list[tuple]:
    """(key, sequence after, sequence before) wherever a key's sequence went down in delivery order."""
    rows = (
        spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0).load(sink)
        .where("_change_type = 'insert'")
        .select("key", "sequence", "partition", "offset", "_commit_version")
        .orderBy("_commit_version", "partition", "offset")
        .collect()
    )
    last: dict[bytes, int] = {}
    bad = []
    for r in rows:
        key = bytes(r["key"])
        if r["sequence"] < last.get(key, -1):
            bad.append((key, last[key], r["sequence"]))
        last[key] = max(last.get(key, -1), r["sequence"])
    return bad


def consume_all(spark, root, group: str, sink: str, gating: bool) -> int:
    consumer = Consumer(spark, root, T, group, ConsumerSettings(max_records_per_batch=40))
    consumer.gate.enabled = gating
    return consumer.run_to_sink(sink).records


@pytest.mark.slow
def test_gates_keep_per_key_order_through_grow_and_shrink(spark, root, tmp_path):
    admin = TopicAdmin(spark, root)
    admin.create(T, 2)
    producer = Producer(spark, root, T, "p")
    producer.send(make_records(spark, 200, keys=12))
    controller = TopicController(spark, root, ControllerSettings(delete_partition_enable=True))
    controller.alter(T, 4)
    producer.send(make_records(spark, 200, keys=12, start=200))
    controller.alter(T, 3)
    producer.send(make_records(spark, 200, keys=12, start=400))
    record = admin.get(T)
    assert record.partitions[2].epoch_after_creation and record.partitions[3].epoch_before_deletion

    gated, ungated = str(tmp_path / "gated"), str(tmp_path / "ungated")
    assert consume_all(spark, root, "g", gated, gating=True) == 600
    assert order_violations(spark, gated) == []
    assert spark.read.format("delta").load(gated).select("sequence").distinct().count() == 600

    assert consume_all(spark, root, "g-ungated", ungated, gating=False) == 600
    assert order_violations(spark, ungated) != []


def keyed(spark, keys: list[str], start: int):
    """Records with exactly these keys, sequences from ``start``."""
    return spark.createDataFrame([(k, str(start + i), start + i) for i, k in enumerate(keys)], "key string, value string, sequence long")


@pytest.mark.slow  # 20 s, moved out to keep the default suite under 20 minutes; `drained` over spans is unit-tested
def test_a_reused_partition_number_is_not_judged_drained_at_its_old_end(spark, root, tmp_path):
    """A long-lived consumer across shrink -> retire -> grow (reusing the number) -> shrink (issue
    9, item 3): the second mark's barrier waits for the partition's new end, not the old one, so
    keys that leave the reused partition are not delivered ahead of their older records there."""
    from log_store.partitioner import partition_for

    admin = TopicAdmin(spark, root)
    admin.create(T, 3)
    controller = TopicController(spark, root, ControllerSettings(delete_partition_enable=True))
    producer = Producer(spark, root, T, "p")
    consumer = Consumer(spark, root, T, "g", ConsumerSettings(max_records_per_batch=30))
    sink = str(tmp_path / "sink")
    names = [f"key-{i}" for i in range(200)]
    in_p2 = [k for k in names if partition_for(k.encode(), 3) == 2][:8]
    others = [k for k in names if partition_for(k.encode(), 3) != 2][:4]
    producer.send(make_records(spark, 150, keys=12))
    controller.alter(T, 2)  # p2 marked
    producer.send(make_records(spark, 150, keys=12, start=150))
    consumer.run_to_sink(sink)  # drains p2 to its first end: the gate sees that end
    assert [r.retired for r in controller.tick(T, delete_delay=0)] == [[2]]
    controller.alter(T, 3)  # p2 reused: its offsets continue after the old end
    # p2's second life holds far more records than the others, so it lags behind them ...
    producer.send(keyed(spark, [in_p2[i % 8] for i in range(120)] + [others[i % 4] for i in range(30)], 300))
    controller.alter(T, 2)  # ... when it is marked again, at a later end
    producer.send(keyed(spark, [in_p2[i % 8] for i in range(150)], 450))  # the same keys, now in p0 and p1
    assert consumer.run_to_sink(sink).records == 300
    assert order_violations(spark, sink) == []


def test_a_shrunk_partitions_last_records_never_share_a_sink_commit_with_the_survivors_new_ones(spark, root, tmp_path):
    """The campaign's seed 8 (short) once saw this: a shrunk partition's last records in the same
    sink commit as the surviving partition's post-shrink records of the same keys. One sink commit
    is one delivery, so no order holds inside it: the gate must deliver the marked partition's tail
    in a batch of its own, however large the batch may be. Here the group has read all of partition
    0 and a third of partition 1 when 1 is marked: only the marked partition's end holds partition
    0's new records back. Read back with delta-rs."""
    import pyarrow as pa
    from deltalake import DeltaTable as RsTable

    from log_store.partitioner import partition_for

    admin = TopicAdmin(spark, root)
    admin.create(T, 2)
    by_partition: dict[int, list[str]] = {0: [], 1: []}
    for i in range(40):
        by_partition[partition_for(f"k{i}".encode(), 2)].append(f"k{i}")
    early = [by_partition[0][i % 3] for i in range(10)] + [by_partition[1][i % 5] for i in range(30)]
    producer = Producer(spark, root, T, "p")
    producer.send(keyed(spark, early, 0))
    sink = str(tmp_path / "sink")
    first = Consumer(spark, root, T, "g", ConsumerSettings(max_records_per_batch=20)).run_to_sink(sink, max_records=20)
    ends = admin.log(T).log_end_offsets()
    assert first.positions == {0: ends[0], 1: 10}, "all of 0 read, partition 1 behind when it is marked"
    TopicController(spark, root, ControllerSettings(delete_partition_enable=True)).alter(T, 1)
    threshold = ends[0] - 1  # partition 0's last offset of its pre-shrink epoch
    producer.send(keyed(spark, [by_partition[1][i % 5] for i in range(20)], 40))  # 1's keys, now in 0
    rest = Consumer(spark, root, T, "g", ConsumerSettings(max_records_per_batch=1000)).run_to_sink(sink)
    assert first.records + rest.records == 60

    rows = pa.table(RsTable(sink).load_cdf(starting_version=0).read_all()).to_pylist()
    by_commit: dict[int, list[dict]] = {}
    for r in rows:
        by_commit.setdefault(r["_commit_version"], []).append(r)
    mixed = [v for v, rs in by_commit.items()
             if any(r["partition"] == 1 for r in rs) and any(r["partition"] == 0 and r["offset"] > threshold for r in rs)]
    assert mixed == [], f"sink commits {mixed} hold partition 1's tail with partition 0's post-shrink records"
    assert rest.batches == 2, "the tail of 1 in one batch, the survivor's new records in the next"
    assert order_violations(spark, sink) == []
