"""``lakelog serve`` on a local root starts no JVM: a real server process with ``LAKELOG_NO_JVM=1``
(any use of Spark's session fails the request that made it, and the server says so) serves
librdkafka's producer, a consumer group and the admin client; then it is stopped and started
again on the same root, and the records and the group's positions are all there."""

import subprocess
import time

import pytest

from tests.serve.conftest import serve_without_jvm as start
from tests.serve.conftest import stop_serving as stop

confluent_kafka = pytest.importorskip("confluent_kafka")


def java_children(proc) -> list[str]:
    found = subprocess.run(["ps", "-o", "pid=,comm=", "--ppid", str(proc.pid)], capture_output=True, text=True).stdout
    return [line for line in found.splitlines() if "java" in line]


def consume(bootstrap, group, want, topic="orders"):
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got, deadline = [], time.monotonic() + 120
    while len(got) < want and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            got.append((m.partition(), m.offset(), m.key(), m.value()))
            if len(got) % 50 == 0:  # the positions of every record returned so far (librdkafka's offset store)
                consumer.commit(asynchronous=False)
    if got and len(got) % 50:
        consumer.commit(asynchronous=False)
    consumer.close()
    return got


def test_a_server_on_a_local_root_serves_producers_groups_and_admins_without_a_jvm(tmp_path):
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    root = tmp_path / "root"
    proc, bootstrap, _took = start(root)
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("orders", 3)])["orders"].result(30)
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                             "linger.ms": 5})
        for i in range(600):
            producer.produce("orders", key=f"k{i % 11}", value=f"v{i}")
        assert producer.flush(60) == 0
        got = consume(bootstrap, "g", 400)
        assert len(got) == 400
        admin.create_partitions([NewPartitions("orders", 4)])["orders"].result(30)
        admin.create_topics([NewTopic("other", 1)])["other"].result(30)
        for i in range(5):
            producer.produce("other", value=f"o{i}")
        assert producer.flush(60) == 0
        deleted = admin.delete_records([confluent_kafka.TopicPartition("other", 0, 2)])
        assert all(f.result(30) is not None for f in deleted.values())
        watcher = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "w"})
        assert watcher.get_watermark_offsets(confluent_kafka.TopicPartition("other", 0), timeout=30) == (2, 5)
        watcher.close()
        assert java_children(proc) == []
    finally:
        err = stop(proc)
    assert "LAKELOG_NO_JVM" not in err, err[-3000:]

    proc, bootstrap, took = start(root)  # the second day: the same root, a new server
    try:
        rest = consume(bootstrap, "g", 200)
        assert len(rest) == 200  # the group's positions kept: the 200 not committed before
        by_key: dict[bytes, list[int]] = {}
        for _p, _o, key, value in sorted(got + rest, key=lambda r: (r[0], r[1])):
            by_key.setdefault(key, []).append(int(value[1:]))
        assert all(values == sorted(values) for values in by_key.values())  # each key in the order produced
        assert sum(len(v) for v in by_key.values()) == 600
        assert java_children(proc) == []
    finally:
        err = stop(proc)
    assert "LAKELOG_NO_JVM" not in err and "Traceback" not in err, err[-3000:]
