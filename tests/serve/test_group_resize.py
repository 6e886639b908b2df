"""Kafka's Java producer and a group of two Java consumers (the classic protocol with
cooperative-sticky, or KIP-848's consumer protocol with the server's uniform assignor) through
`lakelog serve` while the topic grows 4 -> 6 and shrinks 6 -> 5 under them: every key's records
reach the group in the order produced, none lost, whoever computes the assignment (the scenario and
its checks: tests/serve/group_resize.py). Then a group's records cut below its committed offset."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from control_plane.controller import TopicController
from control_plane.group.offsets import GroupOffsets
from tests.serve.conftest import bootstrap
from tests.serve.group_resize import KEYS, PROTOCOLS, across_a_grow_and_a_shrink, in_log_order, java

pytestmark = [pytest.mark.kafka_clients, pytest.mark.long]
JAVA = Path(__file__).parent / "java"


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_a_java_group_keeps_every_keys_order_across_a_grow_and_a_shrink(spark, served, root, tmp_path, protocol):
    producer_config = tmp_path / "producer.properties"
    # VerifiableProducer sets retries=0, which an idempotent producer refuses
    producer_config.write_text("enable.idempotence=true\nacks=all\nretries=2147483647\nlinger.ms=5\n")

    def java_producer(events, boot, topic):
        return events.start("producer", "org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server", boot,
                            "--topic", topic, "--repeating-keys", str(KEYS), "--throughput", "100",
                            "--command-config", str(producer_config))

    across_a_grow_and_a_shrink(spark, served, root, tmp_path, java_producer, protocol)


def test_a_groups_records_cut_below_its_committed_offset_are_reported_expired(spark, served, root):
    from confluent_kafka import Consumer, Producer, TopicPartition

    from control_plane.records import ExpiredRange

    boot = bootstrap(served)
    served.ctx.admin.create("t", 1)
    producer = Producer({"bootstrap.servers": boot})
    for i in range(10):
        producer.produce("t", value=f"v{i}")
    assert producer.flush(60) == 0
    settings = {"bootstrap.servers": boot, "group.id": "g", "auto.offset.reset": "earliest",
                "enable.auto.commit": False}
    first = Consumer(settings)
    first.subscribe(["t"])
    got = []
    while len(got) < 3:
        msg = first.poll(10)
        if msg is not None and not msg.error():
            got.append(msg)
    first.commit(offsets=[TopicPartition("t", 0, got[2].offset() + 1)], asynchronous=False)
    first.close()
    TopicController(spark, root).delete_records("t", {0: 6})  # records 3..5, never delivered, are gone

    second = Consumer(settings)
    second.subscribe(["t"])
    values = []
    deadline = time.monotonic() + 60
    while len(values) < 4 and time.monotonic() < deadline:
        msg = second.poll(1)
        if msg is not None and not msg.error():
            values.append(msg.value())
    second.close()
    assert values == [b"v6", b"v7", b"v8", b"v9"]  # the client reset to the log start, as from Kafka
    assert GroupOffsets(spark, root).expired_ranges("g") == [ExpiredRange(topic="t", partition=0, first=3, end=6)]


def test_a_java_producer_sending_every_record_in_one_stream_keeps_every_keys_order(spark, lagging, root, tmp_path):
    """docs/serve.md's way around the producers' per-partition order, with Java's producer: a
    ``partitioner.class`` that addresses every record to partition 0 (java/FirstPartition.java),
    against a server whose commits wait a second. Every key in produce order in the log and at the
    group, each keyed record placed by its key."""
    from benchmarks.kafka_broker import jars

    classes = tmp_path / "classes"
    subprocess.run(["javac", "-cp", jars(), "-d", str(classes), str(JAVA / "FirstPartition.java")], check=True)
    producer_config = tmp_path / "producer.properties"
    producer_config.write_text("enable.idempotence=true\nacks=all\nretries=2147483647\nlinger.ms=5\n"
                               "partitioner.class=FirstPartition\n")

    def java_producer(events, boot, topic):
        argv = java()
        argv[-1] = f"{argv[-1]}{os.pathsep}{classes}"  # the classpath, with the partitioner
        return events.spawn("producer", [*argv, "org.apache.kafka.tools.VerifiableProducer", "--bootstrap-server",
                                         boot, "--topic", topic, "--repeating-keys", str(KEYS), "--throughput", "100",
                                         "--command-config", str(producer_config)])

    run = across_a_grow_and_a_shrink(spark, lagging, root, tmp_path, java_producer)
    assert {a["partition"] for a in run.acks} == {0}  # one stream: the producer addressed partition 0 only
    for at, values in in_log_order(run.rows).items():
        assert values == sorted(values), at
