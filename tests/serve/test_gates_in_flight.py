"""A Kafka group held at a resize's gates (serve/gates.py) whose member holds fetched, undelivered
records of the old partition when the log stops holding them (delete-records raised the log start
above them; key compaction removed a moved key's pre-resize tombstone past delete.retention.ms):
the gate must not open before the group committed past them, or a moved key's new record reaches
the group before its old one that a member is still to deliver (serve/held.py)."""

from __future__ import annotations

import time

import pytest
from deltalake import DeltaTable

from control_plane.controller import TopicController
from tests.serve.conftest import bootstrap, keys_across_a_grow, poll_into, two_members

pytestmark = pytest.mark.kafka_clients


def test_a_gate_stays_shut_while_a_member_holds_records_below_a_raised_log_start(spark, serve_with, root):
    # proves: a member that fetched the old partition's pre-grow records and has not yet delivered
    # all of them keeps the group's gate shut after delete-records raised the log start above them,
    # until it commits past them; only then does the other member get the moved key's new record
    from confluent_kafka import Producer, TopicPartition

    served = serve_with(group_initial_rebalance_delay_ms=3000)
    boot = bootstrap(served)
    served.ctx.admin.create("t", 1)
    ctl = TopicController(spark, root)
    stays, moved = keys_across_a_grow(3)
    producer = Producer({"bootstrap.servers": boot})

    def send(key: bytes) -> None:
        producer.produce("t", key=key, value=key)
        assert producer.flush(60) == 0

    for key in (stays[0], moved, stays[1]):  # partition 0: offsets 0-2 before the grow, the moved key at 1
        send(key)
    ctl.alter("t", 2)
    send(moved)  # partition 1, offset 0: the moved key's post-grow record
    send(stays[2])  # partition 0, offset 3
    members, got, holder = two_members(boot, "g")
    other = 1 - holder
    poll_into(members[holder], got[holder], 30, until=1)  # its client fetched 0-2 (the gate's limit), delivered one
    assert got[holder] == [(0, 0, stays[0])], got
    time.sleep(1)  # its fetch queue holds offsets 1 and 2 (the moved key's pre-grow record among them)

    ctl.delete_records("t", {0: 3})  # the log start above the threshold, the records held by the holder below it
    poll_into(members[other], got[other], 10)  # the holder has delivered nothing more, committed nothing
    assert got[other] == [], "the moved key's post-grow record came before the holder delivered its pre-grow one"

    poll_into(members[holder], got[holder], 30, until=3)  # the holder delivers what it holds, commits past it
    assert [o for _p, o, _k in got[holder]] == [0, 1, 2]
    members[holder].commit(offsets=[TopicPartition("t", 0, 3)], asynchronous=False)
    poll_into(members[other], got[other], 30, until=1)
    for member in members:
        member.close()
    assert got[other] == [(1, 0, moved)]


def test_a_gate_stays_shut_while_a_member_holds_a_moved_keys_tombstone_that_compaction_removed(
        spark, serve_with, root):
    # proves: a member holding a moved key's pre-grow tombstone (fetched, not delivered) while
    # compaction removes it keeps the group's gate shut until it commits past it
    from confluent_kafka import Producer, TopicPartition

    served = serve_with(group_initial_rebalance_delay_ms=3000)
    boot = bootstrap(served)
    served.ctx.admin.create("t", 1)
    ctl = TopicController(spark, root)
    ctl.alter_config("t", ["cleanup.policy=compact", "min.cleanable.dirty.ratio=0", "delete.retention.ms=0"])
    stays, moved = keys_across_a_grow(2)
    producer = Producer({"bootstrap.servers": boot})

    def send(key: bytes, value: bytes | None) -> None:
        producer.produce("t", key=key, value=value)
        assert producer.flush(60) == 0

    send(stays[0], b"a")  # partition 0, offset 0
    send(moved, None)  # offset 1: the moved key's pre-grow tombstone
    send(stays[1], b"b")  # offset 2
    ctl.alter("t", 2)
    send(moved, b"new")  # partition 1, offset 0
    send(stays[1], b"c")  # partition 0, offset 3: offset 2 superseded
    members, got, holder = two_members(boot, "g")
    other = 1 - holder
    poll_into(members[holder], got[holder], 30, until=1)  # its client fetched 0-2 (the gate's limit), delivered one
    assert got[holder] == [(0, 0, stays[0])], got
    members[holder].commit(offsets=[TopicPartition("t", 0, 1)], asynchronous=False)
    time.sleep(1)  # its fetch queue holds offsets 1 and 2, the tombstone among them

    for _ in range(2):  # the tombstone cleaned, then removed past delete.retention.ms
        ctl.compact_keys("t")
        time.sleep(0.5)
    location = served.ctx.admin.get("t").location
    left = sorted((r["partition"], r["offset"]) for r in DeltaTable(location).to_pyarrow_table(
        columns=["partition", "offset"]).to_pylist())
    assert (0, 1) not in left and (0, 2) not in left, left
    poll_into(members[other], got[other], 10)
    assert got[other] == [], "the moved key's post-grow record came before the holder delivered its tombstone"

    poll_into(members[holder], got[holder], 30, until=3)
    assert [o for _p, o, _k in got[holder]][:3] == [0, 1, 2]
    members[holder].commit(offsets=[TopicPartition("t", 0, 3)], asynchronous=False)
    poll_into(members[other], got[other], 30, until=1)
    for member in members:
        member.close()
    assert got[other] == [(1, 0, moved)]
