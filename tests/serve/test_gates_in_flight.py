"""A Kafka group held at a resize's gates (serve/gates.py) whose member holds fetched, undelivered
records of the old partition when delete-records raises the log start above them: the gate must
not open before the group committed past them, or a moved key's new record reaches the group
before its old one that a member is still to deliver."""

from __future__ import annotations

import time

import pytest

from control_plane.controller import TopicController
from log_store.partitioner import partition_for
from tests.serve.conftest import bootstrap, poll_into, two_members

pytestmark = pytest.mark.kafka_clients


@pytest.mark.xfail(strict=True, reason=(
    "serve/gates.py _TopicReads.past_gaps counts a committed offset below the log start as the log "
    "start, as if the group could deliver nothing below it; but a member's client still holds records "
    "fetched before delete-records raised the log start (librdkafka's fetch queue), so the gate opens "
    "and another member delivers the moved key's post-grow record from the new partition before the "
    "holder delivers the key's pre-grow record. Knowing what a member holds needs the server to track "
    "what it served each member since its last commit, dropped when the member loses the partition "
    "(serve/groups.py, serve/consumer_groups.py), not only serve/gates.py"))
def test_a_gate_stays_shut_while_a_member_holds_records_below_a_raised_log_start(spark, serve_with, root):
    # proves: a member that fetched the old partition's pre-grow records and has not yet delivered
    # all of them keeps the group's gate shut after delete-records raised the log start above them,
    # until it commits past them; only then does the other member get the moved key's new record
    from confluent_kafka import Producer, TopicPartition

    served = serve_with(group_initial_rebalance_delay_ms=3000)
    boot = bootstrap(served)
    served.ctx.admin.create("t", 1)
    ctl = TopicController(spark, root)
    names = [b"k%d" % i for i in range(100)]
    stays = [k for k in names if partition_for(k, 2) == 0][:3]
    moved = next(k for k in names if partition_for(k, 2) == 1)
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
