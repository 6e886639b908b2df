"""``lakelog serve`` on an S3 root starts no JVM, as on a local one (tests/serve/test_no_jvm_server.py):
a real server process with ``LAKELOG_NO_JVM=1`` (any use of Spark's session fails the request that
made it, and the server says so), the root in the S3 emulator, S3A's settings in the configuration
file's ``spark.conf`` and nothing in the environment. librdkafka's producer (idempotent), a consumer
group committing its positions, list offsets (latest, earliest, by time), metadata and the admin
client's groups all go through delta-rs with the storage options those settings give; a server
started again on the root finds the records, the group's positions and a producer's batch, whose
retry it answers from the log. ``make test-s3``."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager

import pytest
import yaml

from tests.serve.conftest import serve_without_jvm, stop_serving
from tests.serve.raw import RawClient, batch, produce
from tests.serve.test_no_jvm_server import consume, java_children

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.s3


@contextmanager
def _serving(conf):
    """A server on the root of ``conf`` without a JVM: its process and address; stopped after, its
    standard error (where a use of Spark's session says ``LAKELOG_NO_JVM``) shown on any failure."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}  # S3 is configured for Spark only
    proc, bootstrap, _took = serve_without_jvm(conf=conf, env=env)
    try:
        yield proc, bootstrap
    except BaseException as exc:
        raise AssertionError(f"the server's standard error:\n{stop_serving(proc)[-6000:]}") from exc
    err = stop_serving(proc)
    assert "LAKELOG_NO_JVM" not in err and "Traceback" not in err, err[-6000:]


def test_a_server_on_an_s3_root_serves_producers_groups_and_offsets_without_a_jvm(s3, tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic

    bucket = s3.create_bucket("serve-nojvm")
    conf = tmp_path / "s3.yaml"
    conf.write_text(yaml.safe_dump({"root": f"s3a://{bucket}/lakelog",
                                    "spark": {"mode": "local", "master": "local[1]", "conf": s3.spark_conf()}}))
    retried = batch([b"r0", b"r1"], producer_id=5, epoch=0, sequence=0)  # an idempotent producer's batch, sent again
    with _serving(conf) as (proc, bootstrap):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("orders", 2)])["orders"].result(60)
        assert "orders" in admin.list_topics(timeout=30).topics
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                             "linger.ms": 5})
        before = int(time.time() * 1000)
        for i in range(60):
            producer.produce("orders", key=f"k{i % 5}", value=f"v{i}")
        assert producer.flush(60) == 0
        got = consume(bootstrap, "g", 40)
        assert len(got) == 40
        consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "w"})
        ends = [consumer.get_watermark_offsets(confluent_kafka.TopicPartition("orders", p), timeout=30) for p in (0, 1)]
        assert [low for low, _high in ends] == [0, 0] and sum(high for _low, high in ends) == 60
        by_time = consumer.offsets_for_times([confluent_kafka.TopicPartition("orders", p, before) for p in (0, 1)],
                                             timeout=30)
        assert [t.offset for t in by_time] == [0, 0]
        committed = consumer.committed([confluent_kafka.TopicPartition("orders", p) for p in (0, 1)], timeout=30)
        assert sum(max(t.offset, 0) for t in committed) == 0  # group w committed nothing
        consumer.close()
        groups = admin.list_consumer_groups().result(30)
        assert "g" in {g.group_id for g in groups.valid}
        raw = RawClient(int(bootstrap.rsplit(":", 1)[1]))
        code, retried_at = produce(raw, "orders", 0, retried)
        raw.close()
        assert code == 0
        assert java_children(proc) == []

    with _serving(conf) as (proc, bootstrap):  # the same root, a new server
        raw = RawClient(int(bootstrap.rsplit(":", 1)[1]))
        assert produce(raw, "orders", 0, retried) == (0, retried_at)  # a retry: answered from the log's records
        raw.close()
        rest = consume(bootstrap, "g", 22)
        assert len(rest) == 22  # the group's positions kept: the 22 not committed before
        values = sorted(v for _p, _o, _k, v in got + rest)
        assert values == sorted([f"v{i}".encode() for i in range(60)] + [b"r0", b"r1"])  # each once
        assert java_children(proc) == []
