"""Kafka's Java KafkaProducer (4.x) in transactions through ``lakelog serve``: commits and aborts
interleaved, a zombie fenced by a new instance of its transactional id; what lakelog's own
read_committed reader then delivers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.serve.line_clients import LineClient
from tests.serve.test_txn_produce import COMMITTED, UNCOMMITTED, read, serve_txn

pytestmark = pytest.mark.kafka_clients


@pytest.fixture()
def txn_served(tmp_path, monkeypatch):
    yield from serve_txn(tmp_path, monkeypatch)


def test_java_transactions_commit_abort_and_a_zombie_fenced(txn_served, tmp_path):
    from tests.serve.group_resize import java

    _server, bootstrap, root, spark = txn_served
    source = Path(__file__).parent / "java" / "TxnProducers.java"
    client = LineClient([*java(), str(source), bootstrap], tmp_path / "txn-producers.err")
    try:
        def ok(line: str) -> None:
            answer = client.ask(line, "done")
            assert answer["ok"], (line, answer)

        client.ask("new a j", "ready")
        for line in ("begin a", "send a out 0 c1", "send a out 1 c2", "send a audit 0 c-audit", "commit a",
                     "begin a", "send a out 0 a1", "send a out 1 a2", "abort a",
                     "begin a", "send a out 1 c3", "commit a"):
            ok(line)
        client.ask("new b j", "ready")  # a new instance: the old one is a zombie now
        ok("begin a")
        zombie = [client.ask(line, "done") for line in ("send a out 0 zombie", "commit a")]
        assert [(z["ok"], z["cause"]) for z in zombie] == [(False, "ProducerFencedException")] * 2, zombie
        for line in ("begin b", "send b out 0 c4", "commit b", "begin b", "send b out 1 a3", "abort b"):
            ok(line)
    finally:
        client.close()
    assert read(spark, root, "out", COMMITTED) == ["c1", "c2", "c3", "c4"]
    assert read(spark, root, "audit", COMMITTED) == ["c-audit"]
    assert set(read(spark, root, "out", UNCOMMITTED)) >= {"c1", "c2", "c3", "c4", "a1", "a2", "a3"}
