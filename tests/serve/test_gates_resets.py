"""A Kafka group that passed a resize's gates (serve/gates.py) and then had its offsets deleted or
reset (DeleteGroups, AlterConsumerGroupOffsets, ``lakelog groups reset`` from another process):
read again from the old partition's start, it is held at the resize again, as a new group is, so
a moved key's post-resize record does not reach it before the key's pre-resize one."""

from __future__ import annotations

import pytest

from control_plane.controller import TopicController
from tests.serve.conftest import bootstrap, keys_across_a_grow, poll_committing, poll_into, two_members

pytestmark = pytest.mark.kafka_clients


@pytest.mark.parametrize("how", ["delete_groups", "alter_offsets", "lakelog_reset"])
def test_a_group_whose_offsets_were_reset_after_it_passed_a_grow_is_held_at_the_grow_again(
        spark, serve_with, root, how):
    # proves: the gate's cached passing outliving the offsets that passed it: after the reset, one
    # member is given the moved key's post-grow record while the other has not read its pre-grow one
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    served = serve_with(group_initial_rebalance_delay_ms=3000)
    boot = bootstrap(served)
    served.ctx.admin.create("t", 1)
    ctl = TopicController(spark, root)
    stays, moved = keys_across_a_grow(2)
    producer = Producer({"bootstrap.servers": boot})
    for key in (stays[0], moved, stays[1]):  # partition 0: offsets 0-2 before the grow, the moved key at 1
        producer.produce("t", key=key, value=key)
    assert producer.flush(60) == 0
    ctl.alter("t", 2)
    producer.produce("t", key=moved, value=moved)  # partition 1, offset 0
    assert producer.flush(60) == 0
    first = Consumer({"bootstrap.servers": boot, "group.id": "g", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "session.timeout.ms": 6000})
    first.subscribe(["t"])
    assert sorted(poll_committing(first, 4)) == [(0, 0), (0, 1), (0, 2), (1, 0)]  # the group passed the grow
    first.close()

    admin = AdminClient({"bootstrap.servers": boot})  # kept: a client destroyed never completes its futures
    if how == "delete_groups":
        admin.delete_consumer_groups(["g"])["g"].result(60)
    elif how == "alter_offsets":
        reset = [ConsumerGroupTopicPartitions("g", [TopicPartition("t", 0, 0), TopicPartition("t", 1, 0)])]
        next(iter(admin.alter_consumer_group_offsets(reset).values())).result(60)
    else:  # another process (another server, the CLI) writes lakelog's group tables
        from control_plane.group.admin import GroupAdmin
        from control_plane.group.reset import ResetTarget

        groups = GroupAdmin(spark, root)
        groups.execute_reset("g", groups.plan_reset("g", "t", ResetTarget(to_earliest=True)))

    members, got, holder = two_members(boot, "g")
    other = 1 - holder
    poll_into(members[other], got[other], 8)  # the holder delivers nothing meanwhile
    assert (1, 0, moved) not in got[other], "the moved key's post-grow record before the holder read its pre-grow one"
    poll_into(members[holder], got[holder], 30, until=3)
    assert [o for _p, o, _k in got[holder]] == [0, 1, 2]
    members[holder].commit(offsets=[TopicPartition("t", 0, 3)], asynchronous=False)
    poll_into(members[other], got[other], 30, until=1)
    for member in members:
        member.close()
    assert got[other] == [(1, 0, moved)]
