"""A Kafka group held at a resize's gates (serve/gates.py) whose pre-resize records were deleted
below the log start before it committed anything there: the group passes the grow, since it can
deliver nothing below the log start, as lakelog's own consumers do (a group that had committed
nothing, reset to the earliest offset, stayed held for good before)."""

from __future__ import annotations

import pytest

from control_plane.controller import TopicController
from tests.serve.conftest import bootstrap, keys_across_a_grow, poll_committing

pytestmark = pytest.mark.kafka_clients


def test_a_kafka_group_that_never_committed_passes_a_grow_whose_pre_grow_records_were_deleted(spark, served, root):
    # proves: a group's gate counting only its committed offsets keeps it below a grow's threshold
    # when delete-records raised the log start past that threshold before the group committed on
    # the partition: it gets neither the old partition's later records nor anything of the new one
    from confluent_kafka import Consumer, Producer

    boot = bootstrap(served)
    served.ctx.admin.create("t", 1)
    ctl = TopicController(spark, root)
    stays, moved = keys_across_a_grow(4)
    producer = Producer({"bootstrap.servers": boot})

    def send(key: bytes) -> None:
        producer.produce("t", key=key, value=key)
        assert producer.flush(60) == 0

    for key in stays[:3]:  # partition 0: offsets 0-2 before the grow
        send(key)
    ctl.alter("t", 2)
    send(stays[3])  # partition 0, offset 3
    send(stays[0])  # partition 0, offset 4
    send(moved)  # partition 1, offset 0
    settings = {"bootstrap.servers": boot, "group.id": "g", "auto.offset.reset": "earliest",
                "enable.auto.commit": False}
    first = Consumer(settings)
    first.subscribe(["t"])
    msg = None
    while msg is None or msg.error():  # its fetches met the gate (its threshold read now): nothing committed
        msg = first.poll(10)
    assert (msg.partition(), msg.offset()) == (0, 0)
    first.close()
    ctl.delete_records("t", {0: 4})  # the pre-grow records and one after: the log start above the threshold

    consumer = Consumer(settings)
    consumer.subscribe(["t"])
    got = poll_committing(consumer, 2)
    consumer.close()
    assert sorted(got) == [(0, 4), (1, 0)]
