"""The records a server keeps of its own commits (serve/tail.py) are only a faster copy of what the
fetch's snapshot says: records another writer (lakelog's producer, a second server) appended between
two fetches are served (from its files, after the kept ones), a log start raised by delete-records
is kept to, a topic created again under its name serves its new records, every record reads as the
log holds it through a resize, delete-records, a compaction and a layout change, and a replicated
topic's records kept above its high watermark wait for it. (A leader root truncated and elected
again: test_replicated_reads.py.)"""

from __future__ import annotations

import time

import pytest
from aiokafka.record._crecords import MemoryRecords
from kio.schema.errors import ErrorCode

from control_plane.controller import TopicController
from control_plane.replication.operations import Replication
from pipelines.producer import Producer
from tests.serve.raw import RawClient, batch, produce
from tests.serve.test_epochs import fetch

pytestmark = pytest.mark.kafka_clients
NONE = 0


def values(answer) -> list[tuple[int, bytes]]:
    """(offset, value) of every record of a fetched partition, each batch's CRC checked."""
    assert answer.error_code == NONE, ErrorCode(answer.error_code).name
    records, out = MemoryRecords(bytes(answer.records or b"")), []
    while (b := records.next_batch()) is not None:
        assert b.validate_crc()
        out += [(r.offset, r.value) for r in b]
    return out


def _rows(spark, vals: list[bytes]):
    return spark.createDataFrame([(None, v) for v in vals], "key binary, value binary")


def test_records_another_writer_appends_between_two_fetches_are_served(spark, served, root):
    served.ctx.admin.create("t", 1)
    client = RawClient(served.port)
    assert produce(client, "t", 0, batch([b"a", b"b", b"c"])) == (NONE, 0)
    hits = served.ctx.tail.hits
    assert values(fetch(client, 0, 0)) == [(0, b"a"), (1, b"b"), (2, b"c")]
    assert served.ctx.tail.hits > hits, "the fetch was not answered from the server's own commit"
    Producer(spark, root, "t", "lakelog-producer").send(_rows(spark, [b"d", b"e"]))  # lakelog's own producer
    hits = served.ctx.tail.hits
    assert values(fetch(client, 0, 0)) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d"), (4, b"e")]
    assert served.ctx.tail.hits > hits, "the kept records were not followed across the other writer's append"
    assert values(fetch(client, 0, 2)) == [(2, b"c"), (3, b"d"), (4, b"e")]
    assert produce(client, "t", 0, batch([b"f"])) == (NONE, 5)
    hits = served.ctx.tail.hits
    assert values(fetch(client, 0, 5)) == [(5, b"f")]
    assert served.ctx.tail.hits > hits
    assert values(fetch(client, 0, 1)) == [(1, b"b"), (2, b"c"), (3, b"d"), (4, b"e"), (5, b"f")]
    # a second server over the root appends: each serves the other's records from the files, its own from memory
    from serve.server import Server
    from serve.settings import ServeSettings

    second = Server(spark, root, ServeSettings(listen="127.0.0.1:0", linger_ms=5, node_id=1)).run_in_thread()
    try:
        other = RawClient(second.port)
        assert values(fetch(other, 0, 4)) == [(4, b"e"), (5, b"f")]
        assert produce(other, "t", 0, batch([b"g", b"h"])) == (NONE, 6)
        assert produce(client, "t", 0, batch([b"i"])) == (NONE, 8)
        log = [(4, b"e"), (5, b"f"), (6, b"g"), (7, b"h"), (8, b"i")]
        # the first server keeps f (5) and i (8), with the second's g and h between them: from 5 it reads
        # f from memory, then the files
        for server, c, since, own in ((served, client, 5, 8), (second, other, 4, 6)):
            assert values(fetch(c, 0, since)) == log[since - 4:]
            hits = server.ctx.tail.hits
            assert values(fetch(c, 0, own)) == [(6, b"g"), (7, b"h"), (8, b"i")][own - 6:]
            assert server.ctx.tail.hits > hits, "a server's own newest records were not answered from memory"
        other.close()
    finally:
        second.stop_thread()
    client.close()


def test_a_fetch_keeps_to_the_log_start_delete_records_raised(spark, served, root):
    served.ctx.admin.create("t", 1)
    client = RawClient(served.port)
    assert produce(client, "t", 0, batch([b"a", b"b"])) == (NONE, 0)
    assert produce(client, "t", 0, batch([b"c", b"d", b"e"])) == (NONE, 2)
    assert values(fetch(client, 0, 1)) == [(1, b"b"), (2, b"c"), (3, b"d"), (4, b"e")]
    controller = TopicController(spark, root)
    controller.delete_records("t", {0: 3})  # the file of a and b removed: a version the run cannot follow
    time.sleep(2 * served.settings.fetch_poll_ms / 1000)  # past the view a fetch may reuse
    assert fetch(client, 0, 2).error_code == ErrorCode.offset_out_of_range
    answer = fetch(client, 0, 3)
    assert answer.log_start_offset == 3 and values(answer) == [(3, b"d"), (4, b"e")]
    assert produce(client, "t", 0, batch([b"f"])) == (NONE, 5)
    assert values(fetch(client, 0, 3)) == [(3, b"d"), (4, b"e"), (5, b"f")]
    controller.delete_records("t", {0: 4})  # inside the file of c, d and e: only the log start moves
    time.sleep(2 * served.settings.fetch_poll_ms / 1000)
    assert fetch(client, 0, 3).error_code == ErrorCode.offset_out_of_range
    hits = served.ctx.tail.hits
    assert values(fetch(client, 0, 5)) == [(5, b"f")]
    assert served.ctx.tail.hits > hits
    answer = fetch(client, 0, 4)
    assert answer.log_start_offset == 4 and values(answer) == [(4, b"e"), (5, b"f")]
    client.close()


def test_a_topic_created_again_under_its_name_serves_its_new_records(spark, served, root):
    served.ctx.admin.create("t", 1)
    client = RawClient(served.port)
    assert produce(client, "t", 0, batch([b"old-a", b"old-b"])) == (NONE, 0)
    assert values(fetch(client, 0, 0)) == [(0, b"old-a"), (1, b"old-b")]
    TopicController(spark, root).delete("t")
    served.ctx.admin.create("t", 1)
    time.sleep(2 * served.settings.fetch_poll_ms / 1000)
    for _ in range(20):  # the server follows the topic's new record
        code, base = produce(client, "t", 0, batch([b"new-x"]))
        if code == NONE:
            break
        time.sleep(0.5)
    answer = fetch(client, 0, base)
    assert values(answer) == [(base, b"new-x")]
    assert all(v.startswith(b"new") for _, v in values(fetch(client, 0, answer.log_start_offset)))
    client.close()


def records_of(answer) -> list[tuple[int, int, int, int, bytes]]:
    """(offset, batch leader epoch, timestamp type, timestamp, value) of every record of a fetched partition."""
    assert answer.error_code == NONE, ErrorCode(answer.error_code).name
    data, out, pos = bytes(answer.records or b""), [], 0
    while pos + 12 <= len(data):
        end = pos + 12 + int.from_bytes(data[pos + 8:pos + 12], "big")
        epoch = int.from_bytes(data[pos + 12:pos + 16], "big", signed=True)
        b = MemoryRecords(data[pos:end]).next_batch()
        assert b.validate_crc()
        out += [(r.offset, epoch, b.timestamp_type, r.timestamp, r.value) for r in b]
        pos = end
    return out


def test_every_fetch_reads_as_the_log_through_a_days_changes(spark, served, root):
    """Whatever a fetch answers from kept records or files, each record's offset, leader epoch,
    timestamp and value are what the log's Delta table holds, from the log start to the high
    watermark: after the server's and lakelog's producers' appends, keyed records placed on another
    partition than sent to, a resize (epochs bumped), delete-records, a compaction and a move to the
    arrival layout, each followed by more of the server's commits."""
    from log_store.topic_log import TopicLog
    from tests.support import log_rows

    controller = TopicController(spark, root)
    served.ctx.admin.create("t", 2)
    client = RawClient(served.port)
    n = [0]

    def commits(partitions: int) -> None:
        for p in range(partitions):
            n[0] += 1
            assert produce(client, "t", p, batch([b"%d-%d-%d" % (n[0], p, i) for i in range(3)]))[0] == NONE
        keys = [b"key-%d" % i for i in range(6)]  # their records go where their keys do, whatever they were sent to
        assert produce(client, "t", 0, batch([b"keyed-%d-%d" % (n[0], i) for i in range(6)], keys=keys))[0] == NONE

    def check(step: str) -> None:
        """Every partition read from its log start, then its newest three records (the server's last
        commit there, kept in memory), each as the log holds them."""
        time.sleep(2 * served.settings.fetch_poll_ms / 1000)  # past the view a fetch may reuse
        log = TopicLog(spark, served.ctx.admin.get("t").location)
        starts, ends = log.earliest_offsets(), log.log_end_offsets()
        rows = log_rows(root, "t", ["partition", "offset", "leader_epoch", "timestamp", "value"])
        hits = served.ctx.tail.hits
        for p, end in ends.items():
            expected = sorted((r["offset"], r["leader_epoch"], 0, int(r["timestamp"].timestamp() * 1000), r["value"])
                              for r in rows if r["partition"] == p and r["offset"] >= starts[p])
            assert records_of(fetch(client, p, end - 3)) == expected[-3:], f"{step}: partition {p}'s newest records"
            found, at = [], starts[p]
            while at < end:
                more = records_of(fetch(client, p, at))
                assert more and more[0][0] == at, f"{step}: partition {p} answered nothing at {at}"
                found += more
                at = more[-1][0] + 1
            assert found == expected, f"{step}: partition {p} read otherwise than its log"
        assert served.ctx.tail.hits > hits, f"{step}: no fetch was answered from kept records"

    commits(2)
    Producer(spark, root, "t", "lakelog-producer").send(spark.createDataFrame(
        [(None, b"spark-%d" % i) for i in range(4)], "key binary, value binary"))
    commits(2)
    check("appends")
    controller.alter("t", 3)
    commits(3)
    check("a resize")
    controller.delete_records("t", {0: 4, 1: 2})
    commits(3)
    check("delete-records")
    controller.compact("t")
    commits(3)
    check("a compaction")
    controller.change_layout("t", "arrival")
    commits(3)
    check("the arrival layout")
    client.close()


def test_records_above_a_replicated_topics_high_watermark_are_kept_and_not_served(spark, served, root, tmp_path):
    """An ``acks: all`` batch appended at the leader while an in-sync follower is cut off is kept in
    memory with the server's commit, but a fetch stops at the high watermark (what every in-sync root
    holds) until the follower has it."""
    from tests.control_plane.test_replication import cut, restore

    follower = str(tmp_path / "us")
    served.ctx.admin.create("t", 1, replicas=[root, follower])
    replication = Replication(spark, root)
    path = replication.path(replication.state("t"), follower)
    client = RawClient(served.port)
    assert produce(client, "t", 0, batch([b"a", b"b"])) == (NONE, 0)
    assert fetch(client, 0, 0).high_watermark == 2  # the follower's log end read (an unreadable root counts with it)
    cut(path)
    assert produce(client, "t", 0, batch([b"c"]))[0] == ErrorCode.not_enough_replicas_after_append
    time.sleep(2 * served.settings.fetch_poll_ms / 1000)  # past the server's cached high watermark
    hits = served.ctx.tail.hits
    answer = fetch(client, 0, 0)
    assert answer.high_watermark == 2 and values(answer) == [(0, b"a"), (1, b"b")]
    assert served.ctx.tail.hits > hits, "the fetch was not answered from kept records"
    above = fetch(client, 0, 2)
    assert above.error_code == NONE and not above.records, "a record above the high watermark was served"
    restore(path)
    replication.replicate("t")
    time.sleep(2 * served.settings.fetch_poll_ms / 1000)
    answer = fetch(client, 0, 1)
    assert answer.high_watermark == 3 and values(answer) == [(1, b"b"), (2, b"c")]
    client.close()
