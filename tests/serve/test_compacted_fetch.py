"""kafka-python through lakelog serve on a topic key compaction left offset gaps in: a fetch from
an offset compacted away returns the next surviving records (Kafka returns the batch holding the
next offset), never an empty answer while records follow; ListOffsets answers the log start and
end. Compared with what delta-rs reads of the log."""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer, TopicPartition

from tests.pipelines.test_compacted_reads import T, compacted, inner_gap  # noqa: F401 (a fixture)
from tests.serve.conftest import bootstrap

pytestmark = pytest.mark.kafka_clients


@pytest.mark.parametrize("where", ["beginning", "inner gap"])
def test_kafka_python_fetches_the_survivors_from_inside_a_gap(served, compacted, where):  # noqa: F811
    kept, ends = compacted
    consumer = KafkaConsumer(bootstrap_servers=bootstrap(served), enable_auto_commit=False, consumer_timeout_ms=3000,
                             max_poll_records=2)
    parts = [TopicPartition(T, p) for p in (0, 1)]
    consumer.assign(parts)
    assert consumer.beginning_offsets(parts) == {tp: 0 for tp in parts}
    assert consumer.end_offsets(parts) == {tp: ends[tp.partition] for tp in parts}
    starts = {p: 0 if where == "beginning" else inner_gap(kept, p) for p in (0, 1)}
    for tp in parts:
        consumer.seek(tp, starts[tp.partition])
    got = sorted((m.partition, m.offset, m.key, m.value) for m in consumer)
    assert got == [r for r in kept if r[1] >= starts[r[0]]]
    assert {tp.partition: consumer.position(tp) for tp in parts} == ends
    consumer.close()
