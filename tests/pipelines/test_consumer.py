"""Single-member consumption: at-least-once with a handler, exactly-once into a Delta sink."""

import pytest

from control_plane.group.offsets import GroupOffsets
from control_plane.topics import TopicAdmin
from pipelines.settings import ConsumerSettings, ProducerSettings
from pipelines.consumer import Consumer
from pipelines.producer import Producer
from tests.support import make_records


@pytest.fixture()
def topic(spark, root):
    TopicAdmin(spark, root).create("orders", 3)
    Producer(spark, root, "orders", "prod", ProducerSettings(batch_size=100)).send(make_records(spark, 240))
    return "orders"


def test_at_least_once_delivers_everything_in_order_and_commits(spark, root, topic):
    seen = []
    consumer = Consumer(spark, root, topic, "g1", ConsumerSettings(max_records_per_batch=100))
    result = consumer.run(lambda df, _r: seen.extend(df.select("partition", "offset", "key", "sequence").collect()))
    assert result.records == 240 and result.batches == 3
    assert sorted(r["sequence"] for r in seen) == list(range(240))
    for key in {bytes(r["key"]) for r in seen}:
        seqs = [r["sequence"] for r in seen if bytes(r["key"]) == key]
        assert seqs == sorted(seqs), "per-key order"
    assert GroupOffsets(spark, root).committed("g1", topic) == Producer(spark, root, topic).log.log_end_offsets()
    assert consumer.run(lambda df, _r: seen.extend(df.collect())).records == 0


def test_handler_failure_commits_nothing_and_redelivers(spark, root, topic):
    def boom(df, _r):
        raise RuntimeError("sink down")

    consumer = Consumer(spark, root, topic, "g2", ConsumerSettings(max_records_per_batch=100))
    with pytest.raises(RuntimeError):
        consumer.run(boom)
    assert GroupOffsets(spark, root).committed("g2", topic) == {}
    got = []
    consumer.run(lambda df, _r: got.extend(df.collect()))
    assert len(got) == 240


def test_max_records_stops_and_resumes(spark, root, topic):
    consumer = Consumer(spark, root, topic, "g3")
    first = consumer.run(lambda df, _r: None, max_records=50)
    assert first.records == 50
    rest = consumer.run(lambda df, _r: None)
    assert rest.records == 190


def test_exactly_once_sink_survives_crash_between_sink_and_offset_commit(spark, root, topic, tmp_path, monkeypatch):
    sink = str(tmp_path / "sink")
    consumer = Consumer(spark, root, topic, "g4", ConsumerSettings(max_records_per_batch=100))
    calls = {"n": 0}
    real_commit = GroupOffsets.commit

    def crash_on_second(self, *a, **kw):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("killed after the sink commit, before the offset commit")
        return real_commit(self, *a, **kw)

    monkeypatch.setattr(GroupOffsets, "commit", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        consumer.run_to_sink(sink)
    monkeypatch.setattr(GroupOffsets, "commit", real_commit)
    assert spark.read.format("delta").load(sink).count() == 200
    result = Consumer(spark, root, topic, "g4", ConsumerSettings(max_records_per_batch=100)).run_to_sink(sink)
    assert result.records == 40
    rows = spark.read.format("delta").load(sink).select("partition", "offset", "sequence").collect()
    assert sorted(r["sequence"] for r in rows) == list(range(240)), "no loss, no duplicate"
    assert GroupOffsets(spark, root).committed("g4", topic) == result.positions


def test_resumed_position_is_the_latest_commit_not_the_latest_clock(spark, root, topic):
    """Positions are latest in commit order (issue 9, item 5): a member whose clock runs an hour
    ahead committed 10 first; the later commit of 20 is where the group resumes."""
    from datetime import timedelta

    from control_plane.group.offsets import GroupOffsets
    from control_plane.records import OffsetCommit, utcnow

    offsets = GroupOffsets(spark, root)
    ahead = OffsetCommit(group="g", topic=topic, partition=0, offset=10, committed_at=utcnow() + timedelta(hours=1))
    offsets.tables.append("offset_commits", [ahead.model_dump()])
    offsets.commit("g", topic, {0: 20})
    assert offsets.committed("g", topic)[0] == 20
    assert Consumer(spark, root, topic, "g").positions()[0] == 20
