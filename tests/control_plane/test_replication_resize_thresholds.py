"""A resize's thresholds across a failover (docs/design.md, "Gating"): the old leader recorded the
log end at the resize's commit; the follower elected before it copied that commit records its own
end, lower by the records the old leader took with ``acks: 1``, which are lost. A consumer whose
gate read the old leader's end follows the topic to the new leader and must judge by the new one.
Real logs in temp dirs; the leader's root is cut off behind a link pointing nowhere."""

from __future__ import annotations

from control_plane.controller import TopicController
from control_plane.replication.operations import Replication
from control_plane.settings import ControllerSettings
from control_plane.topics import TopicAdmin
from log_store.partitioner import partition_for
from log_store.topic_log import TopicLog
from pipelines.consumer import Consumer
from pipelines.producer import Producer
from pipelines.settings import ProducerSettings
from tests.control_plane.test_replication import cut, restore
from tests.support import make_records


def test_a_consumer_that_followed_an_election_opens_a_resize_at_the_end_the_new_leader_recorded(spark, tmp_path):
    """/us holds offsets 0..9 of partition 0; /eu takes 10..14 with ``acks: 1``, then the grow
    (1 -> 2) commits there at log end 15. The consumer delivers 0..9 (the high watermark) and its
    gate reads 14 as partition 0's threshold. /eu is lost; /us, elected, records the rise at 10.
    Records then produced to partition 1 only: past offset 9 the group has delivered every record
    of partition 0's old epoch there is, so they are delivered. Judged by /eu's 14, partition 1
    stayed shut until partition 0 took new records past it."""
    eu, us = str(tmp_path / "eu"), str(tmp_path / "us")
    admin = TopicAdmin(spark, eu)
    admin.create("orders", 1, replicas=[eu, us])
    replication = Replication(spark, eu)
    state = replication.state("orders")
    Producer(spark, eu, "orders", "p", ProducerSettings(acks="all")).send(make_records(spark, 10))
    Producer(spark, eu, "orders", "q").send(make_records(spark, 5, start=10))  # /eu only
    TopicController(spark, eu, ControllerSettings()).alter("orders", 2)  # grown at /eu, not copied
    consumer = Consumer(spark, eu, "orders", "g")
    assert consumer.run(lambda df, r: None).records == 10
    assert consumer.gate.threshold(0, 0) == 14
    cut(replication.path(state, eu))  # the leader's root lost
    try:
        assert replication.elect("orders", us).leader == us  # clean: /us is in the in-sync set
        assert TopicLog.for_path(spark, replication.path(state, us)).snapshot().end_of_epoch(0, 0) == 10
        prefix = next(f"x{i}-" for i in range(100) if partition_for(f"x{i}-0".encode(), 2) == 1)
        Producer(spark, eu, "orders", "r").send(make_records(spark, 5, keys=1, start=100, key_prefix=prefix))
        assert consumer.run(lambda df, r: None).records == 5
        assert consumer.log.path == replication.path(state, us)
    finally:
        restore(replication.path(state, eu))
