"""Fetch and ListOffsets answers of a log with transactions, on the wire, at every version with an
isolation level (no JVM in the server): a transaction's records in transactional batches of their
producer id, each marker a control batch of one control record, never a record; read_committed up
to the last stable offset with the aborted transactions named; LastStableOffset in every answer."""

from __future__ import annotations

import struct
import threading
import time

import pytest
from aiokafka.record._crecords import MemoryRecords

from serve.txn_ids import kafka_producer_id
from tests.serve.raw import RawClient
from tests.serve.test_txn_fetch_clients import end_the_rest, served  # noqa: F401 - a fixture

pytestmark = pytest.mark.kafka_clients
UNCOMMITTED, COMMITTED = 0, 1


def batches(data: bytes) -> list[tuple]:
    """Each batch of ``data``: (first offset, last offset, producer id, transactional, control, what
    it holds: its records' values, or a control record's (version, type) and value)."""
    out, records = [], MemoryRecords(data)
    while (b := records.next_batch()) is not None:
        assert b.validate_crc()
        held = [r.value.decode() if not b.is_control_batch else (struct.unpack(">hh", r.key), r.value) for r in b]
        out.append((b.base_offset, b.base_offset + b.last_offset_delta, b.producer_id, b.is_transactional,
                    b.is_control_batch, held))
    return out


def fetch(port: int, version: int, isolation: int, offset: int = 0):
    client = RawClient(port)
    try:
        response = client.call(1, version, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": isolation,
            "forgotten_topics_data": [], "topics": [{"topic": "orders", "partitions": [
                {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20, "current_leader_epoch": -1,
                 "log_start_offset": -1}]}]})
    finally:
        client.close()
    (part,) = response.responses[0].partitions
    assert part.error_code == 0
    aborted = None if part.aborted_transactions is None else [(a.producer_id, a.first_offset)
                                                               for a in part.aborted_transactions]
    return part.high_watermark, part.last_stable_offset, aborted, batches(part.records or b"")


def latest(port: int, version: int, isolation: int) -> int:
    client = RawClient(port)
    try:
        response = client.call(2, version, {"replica_id": -1, "isolation_level": isolation, "topics": [
            {"name": "orders", "partitions": [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]})
    finally:
        client.close()
    return response.topics[0].partitions[0].offset


PLAIN, CO, AB, OP = (kafka_producer_id(p) for p in ("plain", "co", "ab", "op"))
UP_TO_THE_OPEN_ONE = [(0, 0, -1, False, False, ["p0"]), (1, 1, CO, True, False, ["co0"]),
                      (2, 2, AB, True, False, ["ab0"]), (3, 3, CO, True, False, ["co1"]),
                      (4, 4, AB, True, True, [((0, 0), b"\0\0\0\0\0\0")]), (5, 5, -1, False, False, ["p1"]),
                      (6, 6, CO, True, True, [((0, 1), b"\0\0\0\0\0\0")])]


def port_of(bootstrap: str) -> int:
    return int(bootstrap.rsplit(":", 1)[1])


def test_every_fetch_version_answers_transactions_as_kafka(served):  # noqa: F811
    tx, bootstrap = served
    port = port_of(bootstrap)
    for version in range(4, 13):
        high, stable, aborted, got = fetch(port, version, COMMITTED)
        assert (high, stable, aborted) == (9, 7, [(AB, 0)]), version
        assert got == UP_TO_THE_OPEN_ONE, version
        high, stable, aborted, got = fetch(port, version, UNCOMMITTED)
        assert (high, stable, aborted) == (9, 7, None), version
        assert got == UP_TO_THE_OPEN_ONE + [(7, 7, OP, True, False, ["op0"]), (8, 8, -1, False, False, ["p2"])]
        assert fetch(port, version, COMMITTED, 5)[2] == [], "the abort at 4 is below the fetch"
    for version in range(2, 7):
        assert (latest(port, version, COMMITTED), latest(port, version, UNCOMMITTED)) == (7, 9), version
    end_the_rest(tx)
    deadline = time.monotonic() + 30
    while (answer := fetch(port, 12, COMMITTED))[0] < 14 and time.monotonic() < deadline:
        time.sleep(0.1)  # the server looks at the log again after serve.fetch_poll_ms
    high, stable, aborted, got = answer
    assert (high, stable) == (14, 14)
    assert aborted == [(AB, 0), (AB, 5)], "each abort of ab: its first offset after ab's marker before"
    assert [b[0] for b in got] == list(range(14))
    assert fetch(port, 12, COMMITTED, 12)[2] == [], "ab's last transaction committed"
    assert fetch(port, 12, COMMITTED, 11)[2] == [], "no record of the transaction aborted at 11 is fetched"
    assert fetch(port, 12, COMMITTED, 10)[2] == [(AB, 0)], "ab's marker before 10 not read: the first offset is 0"


def test_a_read_committed_long_poll_answers_when_the_last_stable_offset_moves(served):  # noqa: F811
    tx, bootstrap = served
    port = port_of(bootstrap)
    answer = {}

    def poll() -> None:
        client = RawClient(port)
        began = time.monotonic()
        try:
            answer["response"] = client.call(1, 12, {
                "replica_id": -1, "max_wait": 30_000, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": COMMITTED,
                "forgotten_topics_data": [], "topics": [{"topic": "orders", "partitions": [
                    {"partition": 0, "fetch_offset": 7, "partition_max_bytes": 1 << 20}]}]})
        finally:
            answer["took"] = time.monotonic() - began
            client.close()

    waiting = threading.Thread(target=poll)
    waiting.start()
    time.sleep(2)
    assert waiting.is_alive(), "waits: nothing is stable past 7 while its transaction is open"
    tx.end("op", 0, True, [0])  # the marker at 9: the last stable offset moves to the log end (10)
    waiting.join(60)
    (part,) = answer["response"].responses[0].partitions
    assert answer["took"] < 15, "answered when the marker was written, not at the end of its wait"
    assert (part.high_watermark, part.last_stable_offset) == (10, 10)
    assert [(b[0], b[-1]) for b in batches(part.records)] == [(7, ["op0"]), (8, ["p2"]),
                                                               (9, [((0, 1), b"\0\0\0\0\0\0")])]
