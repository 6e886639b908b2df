"""librdkafka's idempotent producer (confluent-kafka, tests/serve/rdkafka_producer.py) producing
keyed records without pause through `lakelog serve` while the topic grows 4 -> 6 and shrinks 6 -> 5,
read by a group of two Java consumers (cooperative-sticky): every key's records in produce order,
none lost or doubled, by the group's deliveries, lakelog's audit and delta-rs (the scenario and its
checks: tests/serve/group_resize.py).

The producer refreshes its metadata every 2 seconds, so it addresses the old count for a moment
after each resize and the new one after that, moving keys from one of its per-partition sequence
streams to another mid-run. Its partitioner is Kafka's (``murmur2_random``), whose partitions are
those the server places keyed records in, or librdkafka's own default (``consistent_random``,
CRC32), whose are not: the server places every keyed record by murmur2 under the count it commits
with either way (docs/serve.md, "Placement"), so the log and the group see the same; only what
librdkafka reports back differs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from kafka.partitioner.default import murmur2

from tests.serve.group_resize import KEYS, across_a_grow_and_a_shrink, in_log_order

pytestmark = [pytest.mark.kafka_clients, pytest.mark.long]
PRODUCER = Path(__file__).parent / "rdkafka_producer.py"


def kafka_default(key: bytes, n: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % n


@pytest.mark.parametrize("partitioner", ["murmur2_random", None])
def test_a_librdkafka_producer_and_a_java_group_keep_every_keys_order_across_a_grow_and_a_shrink(
        spark, served, root, tmp_path, partitioner):
    settings = ["linger.ms=5", "topic.metadata.refresh.interval.ms=2000"]
    settings += [f"partitioner={partitioner}"] if partitioner else []  # None: librdkafka's default

    def rdkafka_producer(events, boot, topic):
        return events.spawn("producer", [sys.executable, str(PRODUCER), boot, topic, str(KEYS), "100", *settings])

    run = across_a_grow_and_a_shrink(spark, served, root, tmp_path, rdkafka_producer)

    at = {(r["partition"], r["offset"]): r["value"] for r in run.rows}
    where = {r["value"]: r["partition"] for r in run.rows}
    # before the grow, the count the producer knew was the count committed with (4): the server put
    # each keyed record where Kafka's default partitioner does
    before = run.acks[:run.before_grow]
    assert all(where[a["value"].encode()] == kafka_default(a["key"].encode(), 4) for a in before)
    # the producer learned the grow and addressed the new partitions
    assert {a["partition"] for a in run.acks[run.before_grow:run.before_shrink]} >= {4, 5}
    # librdkafka (2.10 and later) never lowers a topic's partition count from Metadata: it went on
    # addressing partition 5 after the shrink, and the server placed those records in writable ones
    assert [a for a in run.acks[run.after_shrink:] if a["partition"] == 5 and where[a["value"].encode()] != 5]
    told = [at.get((a["partition"], a["offset"])) == a["value"].encode() for a in before]
    if partitioner == "murmur2_random":
        assert all(told)  # librdkafka was told where each record is
    else:
        # CRC32 addressed other partitions than murmur2: a batch placed elsewhere is answered -1
        # (offset unknown, which confluent-kafka gives as None), and librdkafka numbers the batch's
        # later records 0, 1, ... from it, places of other records (docs/serve.md, "Placement")
        assert told.count(False) > len(told) / 2, (told.count(False), len(told))


def test_a_librdkafka_producer_sending_every_record_in_one_stream_keeps_every_keys_order(
        spark, lagging, root, tmp_path):
    """The way docs/serve.md gives around the producers' per-partition order: address every record
    to one partition (one sequence stream, which the idempotent producer keeps in order through
    retries) and let the server place each keyed record by its key. Against a server whose commits
    wait a second, across the resizes: every key in produce order in the log and at the group."""
    def rdkafka_producer(events, boot, topic):
        return events.spawn("producer", [sys.executable, str(PRODUCER), boot, topic, str(KEYS), "100",
                                         "linger.ms=5",
                                         "topic.metadata.refresh.interval.ms=2000", "partition=0"])

    run = across_a_grow_and_a_shrink(spark, lagging, root, tmp_path, rdkafka_producer)
    assert {a["partition"] for a in run.acks} == {0}  # one stream: librdkafka addressed partition 0 only
    for at, values in in_log_order(run.rows).items():
        assert values == sorted(values), at
