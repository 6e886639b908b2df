"""Kafka's own consumers reading a log with transactions through ``lakelog serve`` (no JVM in the
server): librdkafka (confluent_kafka) at each isolation level and Kafka's Java consumer at
read_committed. Committed, aborted and open transactions lie between plain records; they are
written with the log's API (``Producers``), as a coordinator writes them, while the server runs.
read_committed gets exactly the committed and plain records in order, none of an aborted
transaction, stops at an open one and goes on once it ends; read_uncommitted gets every record
and no marker; a group's committed offsets hold across a restart with nothing delivered twice."""

from __future__ import annotations

import time

import pytest

from control_plane.topics import TopicAdmin
from log_store.session import LazySession
from tests.jobs.test_no_jvm import lakelog
from tests.pipelines.test_txn_consume import Producers
from tests.serve.conftest import serve_without_jvm as start
from tests.serve.conftest import stop_serving as stop

confluent_kafka = pytest.importorskip("confluent_kafka")
pytestmark = pytest.mark.kafka_clients

EVERY = ["p0", "co0", "ab0", "co1", "p1", "op0", "p2"]  # every record before the open transaction ends
COMMITTED = ["p0", "co0", "co1", "p1"]  # read_committed, below the open transaction (its first offset, 7)
LATER = ["op0", "p2", "ab2"]  # read_committed, once the open transaction commits: ab's next two are aborted, then committed


def transactions(root) -> Producers:
    """One partition: plain records, a committed and an aborted transaction interleaved, then one
    left open (its first record at offset 7) with a plain record after it."""
    tx = Producers(TopicAdmin(LazySession(lambda: pytest.fail("a JVM was started")), str(root)).log("orders"), count=1)
    tx.send("plain", 0, ["p0"])  # 0
    tx.send("co", 0, ["co0"], epoch=0)  # 1
    tx.send("ab", 0, ["ab0"], epoch=0)  # 2
    tx.send("co", 0, ["co1"], epoch=0)  # 3
    assert tx.end("ab", 0, False, [0]) == {0: 4}
    tx.send("plain", 0, ["p1"])  # 5
    assert tx.end("co", 0, True, [0]) == {0: 6}
    tx.send("op", 0, ["op0"], epoch=0)  # 7: open
    tx.send("plain", 0, ["p2"])  # 8
    return tx


def end_the_rest(tx: Producers) -> None:
    """The open transaction committed, then two more of ``ab``: one aborted, one committed."""
    assert tx.end("op", 0, True, [0]) == {0: 9}
    tx.send("ab", 0, ["ab1"], epoch=1)  # 10
    assert tx.end("ab", 1, False, [0]) == {0: 11}
    tx.send("ab", 0, ["ab2"], epoch=2)  # 12
    assert tx.end("ab", 2, True, [0]) == {0: 13}


@pytest.fixture()
def served(tmp_path, monkeypatch):
    monkeypatch.setenv("LAKELOG_NO_JVM", "1")
    root = tmp_path / "root"
    lakelog(root, "topics", "create", "--topic", "orders", "--partitions", "1")
    tx = transactions(root)
    proc, bootstrap, _took = start(root)
    try:
        yield tx, bootstrap
    finally:
        stop(proc)


def consumer(bootstrap: str, group: str, isolation: str):
    c = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False, "isolation.level": isolation,
                                  "fetch.wait.max.ms": 200})
    c.subscribe(["orders"])
    return c


def poll(c, want: int | None, seconds: float) -> list[tuple[int, str]]:
    """(offset, value) of records until ``want`` came (None: for ``seconds``), each committed."""
    got, deadline = [], time.monotonic() + seconds
    while (want is None or len(got) < want) and time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and not m.error():
            got.append((m.offset(), m.value().decode()))
            c.commit(m, asynchronous=False)
    return got


def test_read_committed_stops_at_an_open_transaction_and_goes_on_when_it_ends(served):
    tx, bootstrap = served
    c = consumer(bootstrap, "committed", "read_committed")
    try:
        assert poll(c, len(COMMITTED), 60) == [(0, "p0"), (1, "co0"), (3, "co1"), (5, "p1")]
        assert poll(c, None, 3) == [], "nothing at or past the open transaction's first offset (7)"
        _low, high = c.get_watermark_offsets(confluent_kafka.TopicPartition("orders", 0), timeout=30, cached=False)
        assert high == 7, "ListOffsets' latest at read_committed: the last stable offset"
        end_the_rest(tx)
        assert poll(c, len(LATER), 60) == [(7, "op0"), (8, "p2"), (12, "ab2")], "woken by the markers, no restart"
        assert poll(c, None, 2) == []
    finally:
        c.close()


def test_read_uncommitted_gets_every_record_and_no_marker(served):
    tx, bootstrap = served
    c = consumer(bootstrap, "uncommitted", "read_uncommitted")
    try:
        assert [v for _o, v in poll(c, len(EVERY), 60)] == EVERY
        end_the_rest(tx)
        assert poll(c, 2, 60) == [(10, "ab1"), (12, "ab2")]
        assert poll(c, None, 2) == [], "no marker delivered as a record"
    finally:
        c.close()


def test_a_group_resumes_past_markers_without_redelivery(served):
    tx, bootstrap = served
    end_the_rest(tx)
    c = consumer(bootstrap, "resumes", "read_committed")
    try:
        assert [v for _o, v in poll(c, 5, 60)] == ["p0", "co0", "co1", "p1", "op0"]
    finally:
        c.close()
    c = consumer(bootstrap, "resumes", "read_committed")
    try:
        assert poll(c, 2, 60) == [(8, "p2"), (12, "ab2")], "from the committed offset on"
        assert poll(c, None, 1) == []
        (position,) = c.position([confluent_kafka.TopicPartition("orders", 0)])
        assert position.offset == 14, "past the last marker (13)"
        c.commit(asynchronous=False)
        (committed,) = c.committed([confluent_kafka.TopicPartition("orders", 0)], timeout=30)
        assert committed.offset == 14
        tx.send("plain", 0, ["p3"])  # 14, after the last marker
        assert poll(c, 1, 60) == [(14, "p3")]
        (committed,) = c.committed([confluent_kafka.TopicPartition("orders", 0)], timeout=30)
        assert committed.offset == 15
    finally:
        c.close()
    tx.send("plain", 0, ["p4"])  # 15
    c = consumer(bootstrap, "resumes", "read_committed")
    try:
        assert poll(c, 1, 60) == [(15, "p4")], "nothing delivered twice"
    finally:
        c.close()


def test_kafka_java_consumer_reads_committed_and_resumes_past_markers(served):
    from tests.serve.kafka_tools import kafka

    tx, bootstrap = served

    def read(n: int | None) -> list[str]:
        args = ["--bootstrap-server", bootstrap, "--topic", "orders", "--group", "java", "--from-beginning",
                "--isolation-level", "read_committed", "--timeout-ms", "8000" if n is None else "60000"]
        return kafka("console-consumer", *args, *(["--max-messages", str(n)] if n else []), check=False).split()

    assert read(len(COMMITTED)) == COMMITTED
    assert read(None) == [], "stops at the open transaction"
    end_the_rest(tx)
    assert read(len(LATER)) == LATER
    tx.send("plain", 0, ["p3"])  # 14, after the last marker
    assert read(1) == ["p3"], "resumed past the markers: nothing again"


def test_kafka_python_reads_committed(served):
    kafka = pytest.importorskip("kafka")
    tx, bootstrap = served
    end_the_rest(tx)
    c = kafka.KafkaConsumer("orders", bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                            isolation_level="read_committed", consumer_timeout_ms=8000)
    try:
        got = [(m.offset, m.value.decode()) for m in c]
    finally:
        c.close()
    assert got == [(0, "p0"), (1, "co0"), (3, "co1"), (5, "p1"), (7, "op0"), (8, "p2"), (12, "ab2")]
