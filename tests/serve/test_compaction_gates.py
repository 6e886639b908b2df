"""Key compaction under a Kafka group held at a resize's gates (serve/gates.py): the group passes
the grow once it committed past every pre-grow record the log still holds, whatever compaction
removed after the gate first looked."""

from __future__ import annotations

import time

import pytest
from deltalake import DeltaTable

from control_plane.controller import TopicController
from log_store.partitioner import partition_for
from tests.serve.conftest import bootstrap, poll_committing

pytestmark = pytest.mark.kafka_clients


def test_a_kafka_group_passes_a_grow_whose_last_pre_grow_record_was_compacted_after_the_gate_looked(
        spark, served, root):
    # proves: compaction removing a partition's last pre-grow record (superseded by its key's
    # post-grow record in the same partition) after the group's gate computed its threshold leaves
    # the group held forever: it gets neither that key's new record nor anything of the new partition
    from confluent_kafka import Consumer, Producer, TopicPartition

    boot = bootstrap(served)
    served.ctx.admin.create("t", 1)
    ctl = TopicController(spark, root)
    ctl.alter_config("t", ["cleanup.policy=compact", "min.cleanable.dirty.ratio=0"])
    names = [b"k%d" % i for i in range(100)]
    a, b, c = [k for k in names if partition_for(k, 2) == 0][:3]  # keys partition 0 keeps after 1 -> 2
    moved = next(k for k in names if partition_for(k, 2) == 1)
    producer = Producer({"bootstrap.servers": boot})

    def send(key: bytes) -> None:
        producer.produce("t", key=key, value=key)
        assert producer.flush(60) == 0

    for key in (a, b, c):  # partition 0: offsets 0, 1, 2 before the grow
        send(key)
    ctl.alter("t", 2)
    send(c)  # partition 0, offset 3: c's record after the grow
    send(moved)  # partition 1, offset 0
    settings = {"bootstrap.servers": boot, "group.id": "g", "auto.offset.reset": "earliest",
                "enable.auto.commit": False}
    first = Consumer(settings)
    first.subscribe(["t"])
    msg = None
    while msg is None or msg.error():  # its fetches met the gate: partition 0 up to offset 2, nothing of 1
        msg = first.poll(10)
    assert (msg.partition(), msg.offset()) == (0, 0)
    first.commit(offsets=[TopicPartition("t", 0, 1)], asynchronous=False)
    first.close()

    assert ctl.compact_keys("t") != []
    location = served.ctx.admin.get("t").location
    left = sorted((r["partition"], r["offset"]) for r in DeltaTable(location).to_pyarrow_table(
        columns=["partition", "offset"]).to_pylist())
    assert left == [(0, 0), (0, 1), (0, 3), (1, 0)], "c's pre-grow record at offset 2 compacted away"

    second = Consumer(settings)
    second.subscribe(["t"])
    got = poll_committing(second, 3)
    second.close()
    assert sorted(got) == [(0, 1), (0, 3), (1, 0)]


def test_a_kafka_group_drains_a_marked_partition_whose_trailing_tombstone_was_compacted_away(spark, served, root):
    # proves: a shrink's marked partition ending in a tombstone that compaction removed is never
    # drained by a Kafka group (its position stays after the last record left, below the final log
    # end), so the group gets nothing produced after the shrink until the delete delay retires it
    from confluent_kafka import Consumer, Producer

    from control_plane.settings import ControllerSettings

    boot = bootstrap(served)
    served.ctx.admin.create("t", 2)
    ctl = TopicController(spark, root, ControllerSettings(delete_partition_enable=True))
    ctl.alter_config("t", ["cleanup.policy=compact", "min.cleanable.dirty.ratio=0", "delete.retention.ms=0"])
    names = [b"k%d" % i for i in range(100)]
    kept, later = [k for k in names if partition_for(k, 2) == 0][:2]
    gone = next(k for k in names if partition_for(k, 2) == 1)
    producer = Producer({"bootstrap.servers": boot})

    def send(key: bytes, value: bytes | None) -> None:
        producer.produce("t", key=key, value=value)
        assert producer.flush(60) == 0

    send(kept, b"before")  # partition 0, offset 0
    send(gone, b"v")  # partition 1, offset 0
    send(gone, None)  # partition 1, offset 1: its key deleted
    ctl.alter("t", 1)  # marks partition 1, final end 2
    send(later, b"after")  # partition 0, offset 1: after the shrink
    now = int(time.time() * 1000)
    ctl.compact_keys("t", now_ms=now)  # dates the tombstone
    ctl.compact_keys("t", now_ms=now + 1)  # past delete.retention.ms=0: removed
    location = served.ctx.admin.get("t").location
    left = sorted((r["partition"], r["offset"]) for r in DeltaTable(location).to_pyarrow_table(
        columns=["partition", "offset"]).to_pylist())
    assert left == [(0, 0), (0, 1)], "partition 1 holds no record: the tombstone went past its horizon"

    consumer = Consumer({"bootstrap.servers": boot, "group.id": "g", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe(["t"])
    got = poll_committing(consumer, 2)
    consumer.close()
    assert got == [(0, 0), (0, 1)]
