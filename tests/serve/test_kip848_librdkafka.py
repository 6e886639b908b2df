"""librdkafka's KIP-848 consumer (``group.protocol=consumer``) through a server without a JVM: it
sends SubscribedTopicRegex "" beside its topic names, which Kafka's broker counts as no regex; two
members share a topic, the second taking partitions the first gives up."""

from __future__ import annotations

import time

import pytest

from tests.serve.conftest import serve_without_jvm, stop_serving

confluent_kafka = pytest.importorskip("confluent_kafka")
pytestmark = pytest.mark.kafka_clients


def test_two_librdkafka_kip848_members_share_a_topic(tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic

    proc, boot, _took = serve_without_jvm(tmp_path / "root")
    try:
        admin = AdminClient({"bootstrap.servers": boot})
        admin.create_topics([NewTopic("t", 4)])["t"].result(30)
        producer = confluent_kafka.Producer({"bootstrap.servers": boot})
        for i in range(200):
            producer.produce("t", key=f"k{i % 13}", value=f"v{i}")
        assert producer.flush(30) == 0
        settings = {"bootstrap.servers": boot, "group.id": "g", "group.protocol": "consumer",
                    "auto.offset.reset": "earliest", "enable.auto.commit": False}
        members = [confluent_kafka.Consumer(settings)]
        members[0].subscribe(["t"])
        got: set[bytes] = set()

        def poll(consumer) -> None:
            m = consumer.poll(0.2)
            if m is not None and not m.error():
                got.add(m.value())
                consumer.commit(m, asynchronous=False)

        deadline = time.monotonic() + 60
        while len(got) < 50 and time.monotonic() < deadline:
            poll(members[0])
        members.append(confluent_kafka.Consumer(settings))
        members[1].subscribe(["t"])
        while (len(got) < 200 or not all(m.assignment() for m in members)) and time.monotonic() < deadline:
            for m in members:
                poll(m)
        assigned = [sorted(tp.partition for tp in m.assignment()) for m in members]
        for m in members:
            m.close()
        assert len(got) == 200 and all(assigned) and sorted(sum(assigned, [])) == [0, 1, 2, 3], (len(got), assigned)
    finally:
        err = stop_serving(proc)
    assert "Traceback" not in err, err[-3000:]
