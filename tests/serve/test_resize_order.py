"""Kafka producers writing through `lakelog serve` while the topic grows and shrinks: the server
places keyed records under the count it commits with (serve/placement.py, docs/serve.md
"Placement"), so a key keeps its order for a gated consumer, whatever count the client used."""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.partitioner.default import murmur2

from control_plane.controller import TopicController
from control_plane.settings import ControllerSettings
from pipelines.consumer import Consumer
from pipelines.settings import ConsumerSettings
from tests.serve.conftest import bootstrap
from tests.serve.line_clients import java_producers
from tests.support import log_rows

pytestmark = pytest.mark.kafka_clients
KEYS = 24


def kafka_default(key: bytes, n: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % n


def delivered_out_of_order(spark, sink: str) -> list[tuple]:
    """(key, counter before, counter after) wherever a key's produce counter went down in the
    sink's delivery order (commit version, then partition and offset within a commit)."""
    rows = (spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0).load(sink)
            .where("_change_type = 'insert' and key is not null")  # unkeyed records have no order to keep
            .select("key", "value", "partition", "offset", "_commit_version")
            .orderBy("_commit_version", "partition", "offset").collect())
    last: dict[bytes, int] = {}
    bad = []
    for r in rows:
        n = int(bytes(r["value"]).split(b"|")[1])
        if n < last.get(bytes(r["key"]), -1):
            bad.append((bytes(r["key"]), last[bytes(r["key"])], n))
        last[bytes(r["key"])] = max(n, last.get(bytes(r["key"]), -1))
    return bad


@pytest.mark.long
def test_a_librdkafka_producer_keeps_every_keys_order_across_a_grow_and_a_shrink(spark, served, root, tmp_path):
    boot = bootstrap(served)
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic("orders", 4, 1)])["orders"].result(60)
    # murmur2 is Kafka's default partitioner; metadata refreshed only every 10 minutes, so the
    # producer keeps addressing the old count after each resize
    producer = Producer({"bootstrap.servers": boot, "enable.idempotence": True, "linger.ms": 5,
                         "partitioner": "murmur2", "topic.metadata.refresh.interval.ms": 600_000})
    errors, counter, stop = [], [0], threading.Event()

    def produce():
        while not stop.is_set() or counter[0] < 600:
            n = counter[0]
            producer.produce("orders", key=f"k{n % KEYS}", value=f"k{n % KEYS}|{n}",
                             on_delivery=lambda err, msg: err and errors.append(err))
            counter[0] += 1
            producer.poll(0)
            time.sleep(0.002)
        errors.extend(["unflushed"] * producer.flush(120))

    thread = threading.Thread(target=produce)
    thread.start()
    controller = TopicController(spark, root,
                                 ControllerSettings(delete_partition_enable=True))
    try:
        while counter[0] < 200:
            time.sleep(0.05)
        controller.alter("orders", 6)
        at_grow = counter[0]
        while counter[0] < at_grow + 200:
            time.sleep(0.05)
        controller.alter("orders", 5)
        at_shrink = counter[0]
        while counter[0] < at_shrink + 200:
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join(180)
    assert errors == [] and not thread.is_alive()
    total = counter[0]

    rows = log_rows(root, "orders")  # delta-rs: each record once, none lost
    assert sorted(int(r["value"].split(b"|")[1]) for r in rows) == list(range(total))
    assert len({(r["partition"], r["offset"]) for r in rows}) == total
    grown = [r for r in rows if r["partition"] >= 4]
    assert grown, "no record reached the grown partitions"
    for r in grown:  # a record in a new partition was placed under a new count (6, then 5), not the client's 4
        assert r["partition"] in (kafka_default(r["key"], 6), kafka_default(r["key"], 5))
    assert all(r["partition"] != 5 for r in rows if int(r["value"].split(b"|")[1]) >= at_shrink + 100)

    sink = str(tmp_path / "sink")
    got = Consumer(spark, root, "orders", "g", ConsumerSettings(max_records_per_batch=40)).run_to_sink(sink)
    assert got.records == total
    assert delivered_out_of_order(spark, sink) == []


def first_key_placed_apart(count: int, addressed: int) -> bytes:
    return next(k for k in (f"r{i}".encode() for i in range(1000)) if kafka_default(k, count) != addressed)


def test_a_re_placed_batch_retried_after_a_grow_is_a_duplicate_answered_as_its_first_send_was(spark, served, root):
    from tests.serve.raw import RawClient, batch, produce

    served.ctx.admin.create("t", 2)
    client = RawClient(served.port)
    key = first_key_placed_apart(2, 0)  # the client addresses 0; the key belongs in 1
    first = batch([b"a", b"b"], producer_id=91, epoch=0, sequence=0, keys=[key, key])
    assert produce(client, "t", 0, first) == (0, -1)  # placed at offsets 0-1 of partition 1: not where addressed
    TopicController(spark, root).alter("t", 3)
    assert produce(client, "t", 0, first) == (0, -1)  # the retry: judged by its stream, not placed again
    served.batcher.judging.recent.clear()  # answered from the log, as after a restart
    assert produce(client, "t", 0, first) == (0, -1)
    nxt = batch([b"c"], producer_id=91, epoch=0, sequence=2, keys=[key])
    assert produce(client, "t", 0, nxt)[0] == 0
    client.close()
    rows = sorted((r["value"], r["partition"]) for r in log_rows(root, "t"))
    assert rows == [(b"a", 1), (b"b", 1), (b"c", kafka_default(key, 3))]


def test_a_stale_producer_a_custom_partitioner_and_a_marked_partition_get_what_the_docs_say(spark, served, root):
    boot = bootstrap(served)
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic("t", 4, 1)])["t"].result(60)
    stale = {"bootstrap.servers": boot, "enable.idempotence": True, "topic.metadata.refresh.interval.ms": 600_000}
    default = Producer({**stale, "partitioner": "murmur2"})
    crc = Producer({**stale, "partitioner": "consistent"})  # librdkafka's CRC32 partitioner: a custom one here
    seen = []
    report = lambda err, msg: seen.append((err, msg.value(), msg.partition()))  # noqa: E731
    for p in (default, crc):
        p.produce("t", key="warm", value="warm", on_delivery=report)
        assert p.flush(60) == 0
    controller = TopicController(spark, root, ControllerSettings(delete_partition_enable=True, delete_delay_seconds=0))
    controller.alter("t", 6)  # both producers still think there are 4
    for i in range(40):
        default.produce("t", key=f"s{i}", value=f"stale|{i}", on_delivery=report)
        crc.produce("t", key=f"c{i}", value=f"crc|{i}", on_delivery=report)
    crc.produce("t", value="unkeyed|3", partition=3, on_delivery=report)
    for p in (default, crc):
        assert p.flush(60) == 0
    fresh = Producer({**stale, "partitioner": "murmur2"})  # knows 6 partitions
    fresh.produce("t", key="warm", value="warm6", on_delivery=report)
    assert fresh.flush(60) == 0
    controller.alter("t", 5)  # partition 5 is marked: not writable
    fresh.produce("t", value="unkeyed|5", partition=5, on_delivery=report)
    fresh.produce("t", key="m", value="keyed|5", partition=5, on_delivery=report)
    assert fresh.flush(60) == 0
    assert [e for e, *_ in seen if e is not None] == []

    where = {r["value"]: (r["key"], r["partition"]) for r in log_rows(root, "t")}
    for i in range(40):  # keyed: murmur2 under the count committed with (6), whatever the client chose
        assert where[f"stale|{i}".encode()][1] == kafka_default(f"s{i}".encode(), 6)
        assert where[f"crc|{i}".encode()][1] == kafka_default(f"c{i}".encode(), 6)
    assert any(kafka_default(f"s{i}".encode(), 6) != kafka_default(f"s{i}".encode(), 4) for i in range(40))
    assert where[b"unkeyed|3"][1] == 3  # unkeyed: where the custom choice sent it
    assert where[b"unkeyed|5"][1] == 0  # addressed to the marked partition 5: the 5 % 5-th writable one
    assert where[b"keyed|5"][1] == kafka_default(b"m", 5)
    # librdkafka was told the partition it addressed; the log has the record where it was placed
    told = {v: p for _e, v, p in seen}
    assert told[b"keyed|5"] == 5 and where[b"keyed|5"][1] != 5
    for i in range(40):  # stale: after the grow, both producers addressed partitions of a count of 4
        assert told[f"stale|{i}".encode()] == kafka_default(f"s{i}".encode(), 4)
        assert told[f"crc|{i}".encode()] < 4

    assert controller.tick("t")[0].retired == [5]  # no group reads t: the delay (0) retires it
    fresh.produce("t", value="unkeyed|retired", partition=5, on_delivery=report)  # it still counts 6
    fresh.produce("t", key="m", value="keyed|retired", partition=5, on_delivery=report)
    assert fresh.flush(60) == 0
    assert [e for e, *_ in seen if e is not None] == []
    where = {r["value"]: r["partition"] for r in log_rows(root, "t")}
    assert where[b"unkeyed|retired"] == 0 and where[b"keyed|retired"] == kafka_default(b"m", 5)


def test_java_producers_with_stale_metadata_and_a_custom_partitioner_get_what_the_docs_say(
        spark, served, root, tmp_path):
    """docs/serve.md, "Placement": a producer's count may be old after a resize (Java's producer
    refreshes every ``metadata.max.age.ms``); a custom partitioner (Java's ``partitioner.class``, or an
    explicit partition) decides only for unkeyed records; keyed records go to ``murmur2(key) % count``
    under the count the append commits with; an unkeyed record stays where addressed while that
    partition is writable, else goes to the ``addressed % n``-th writable one; a batch addressed to a
    marked or retired partition is placed, never refused; the client is told the partition it
    addressed. And every key keeps its order for a gated group across the grow, the shrink and the
    retirement."""
    boot = bootstrap(served)
    served.ctx.admin.create("t", 4)
    controller = TopicController(spark, root, ControllerSettings(delete_partition_enable=True, delete_delay_seconds=0))
    producers = java_producers(boot, "t", tmp_path)
    sent = [0]  # a counter across producers: each key's records in the order they were sent

    def burst(name: str) -> tuple[list[str], str]:
        """Every key once and one unkeyed record, each sent where the partitioner says, then flushed."""
        keyed = []
        for k in range(KEYS):
            keyed.append(f"k{k}|{sent[0]}")
            producers.tell(f"send {name} k{k} {keyed[-1]} -")
            sent[0] += 1
        unkeyed = f"u|{sent[0]}"
        producers.tell(f"send {name} - {unkeyed} -")
        sent[0] += 1
        producers.ask(f"flush {name}", "flushed")
        return keyed, unkeyed

    def placed(values: list[str], count: int) -> bool:
        return all(where[v.encode()] == kafka_default(v.split("|")[0].encode(), count) for v in values)

    sink = str(tmp_path / "sink")
    group = Consumer(spark, root, "t", "g", ConsumerSettings(max_records_per_batch=40))
    try:
        assert producers.ask("new old 3600000", "count")["count"] == 4  # refreshes once an hour
        k0, u0 = burst("old")
        controller.alter("t", 6)
        assert producers.count("old") == 4  # stale: it still addresses partition 3
        k1, u1 = burst("old")
        producers.tell("send old - x|explicit 1")  # an explicit partition: the client's choice, kept
        producers.tell("send old k0 k0|%d 2" % sent[0])  # keyed with an explicit partition: by its key
        explicit_keyed = f"k0|{sent[0]}"
        sent[0] += 1
        producers.ask("flush old", "flushed")
        assert producers.ask("new fresh 3600000", "count")["count"] == 6  # addresses partition 5
        assert producers.ask("new quick 1000", "count")["count"] == 6
        k2, u2 = burst("fresh")
        controller.alter("t", 5)  # partition 5 is marked: not writable
        deadline = time.monotonic() + 60
        while producers.count("quick") != 5:  # Java's producer takes the lower count at its next refresh
            assert time.monotonic() < deadline, "the Java producer never took the shrink's count"
            time.sleep(0.5)
        assert producers.count("fresh") == 6 and producers.count("old") == 4
        k3, u3 = burst("fresh")  # to the marked partition 5
        k3b, u3b = burst("old")
        where = {r["value"]: r["partition"] for r in log_rows(root, "t")}
        assert placed(k0, 4) and placed(k1, 6) and placed(k2, 6) and placed(k3, 5) and placed(k3b, 5)
        assert where[explicit_keyed.encode()] == kafka_default(b"k0", 6)
        assert any(kafka_default(f"k{k}".encode(), 6) != kafka_default(f"k{k}".encode(), 4) for k in range(KEYS))
        assert [where[u.encode()] for u in (u0, u1, u2, u3, u3b)] == [3, 3, 5, 0, 3]
        assert where[b"x|explicit"] == 1

        assert group.run_to_sink(sink).records > 0  # the group drains partition 5, which then retires
        assert controller.tick("t")[0].retired == [5]
        assert producers.count("fresh") == 6
        k4, u4 = burst("fresh")  # to the retired partition 5
        where = {r["value"]: r["partition"] for r in log_rows(root, "t")}
        assert placed(k4, 5) and where[u4.encode()] == 0
        group.run_to_sink(sink)
    finally:
        producers.close()

    assert [e for e in producers.outcomes if e["event"] != "acked"] == []
    told = {e["value"]: e["partition"] for e in producers.outcomes}
    # the client is told the partition it addressed, where the log may not have it
    assert {told[v] for v in k1 + k3b} == {3} and {told[v] for v in k2 + k3 + k4} == {5}
    assert told[explicit_keyed] == 2
    # every record acknowledged once and delivered once to the group, the explicit unkeyed one too
    assert len(told) == len(producers.outcomes) == sent[0] + 1
    got = sorted(bytes(r["value"]).decode() for r in spark.read.format("delta").load(sink).select("value").collect())
    assert got == sorted(told)
    assert delivered_out_of_order(spark, sink) == []
