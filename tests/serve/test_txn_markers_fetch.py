"""A Kafka client fetching through ``lakelog serve`` from a log with transaction markers (written
with the log's API: serve's transactional producer is not built yet)."""

import pytest

from control_plane.topics import TopicAdmin
from log_store.session import LazySession
from tests.jobs.test_no_jvm import lakelog
from tests.pipelines.test_txn_consume import Producers
from tests.serve.conftest import serve_without_jvm as start
from tests.serve.conftest import stop_serving as stop
from tests.serve.test_no_jvm_server import consume

confluent_kafka = pytest.importorskip("confluent_kafka")


def test_a_fetch_delivers_no_marker_as_a_record(tmp_path, monkeypatch):
    monkeypatch.setenv("LAKELOG_NO_JVM", "1")
    root = tmp_path / "root"
    lakelog(root, "topics", "create", "--topic", "orders", "--partitions", "1")
    tx = Producers(TopicAdmin(LazySession(lambda: pytest.fail("a JVM was started")), str(root)).log("orders"), count=1)
    tx.send("co", 0, ["co0"], epoch=0)
    tx.end("co", 0, True, [0])
    tx.send("plain", 0, ["p0"])
    proc, bootstrap, _took = start(root)
    try:
        got = consume(bootstrap, "g", 2)
    finally:
        stop(proc)
    assert [(o, v) for _p, o, _k, v in got] == [(0, b"co0"), (2, b"p0")]
