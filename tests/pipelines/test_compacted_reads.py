"""Every reader across the offset gaps key compaction leaves (``cleanup.policy=compact``), as
Kafka's readers of a compacted topic: the surviving records in offset order, nothing reported
lost, positions past the end. The topic is compacted with the controller's ``compact_keys`` (what
``topics compact --keys`` runs), then appended to, so reads cross from the gaps into dense
offsets. What survived is read with delta-rs, not through lakelog."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from control_plane.controller import TopicController
from control_plane.group.offsets import GroupOffsets
from control_plane.topics import TopicAdmin
from pipelines.audit import run_audit
from pipelines.consumer import ArrowHandler, Consumer
from pipelines.group_consumer import GroupConsumer
from pipelines.partition_read import read_partition
from pipelines.producer import Producer
from pipelines.settings import ConsumerSettings
from pipelines.spark.reading import missing_records
from tests.pipelines.spark.test_source import sink_batches
from tests.support import make_records

T = "kc"


def survivors(spark, root) -> list[tuple[int, int, bytes, bytes]]:
    """(partition, offset, key, value) of every record the log holds, by partition and offset (delta-rs)."""
    table = DeltaTable(TopicAdmin(spark, root).get(T).location).to_pyarrow_table(
        columns=["partition", "offset", "key", "value"])
    return sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in table.to_pylist())


@pytest.fixture()
def compacted(spark, root) -> tuple[list[tuple], dict[int, int]]:
    """A compacted topic of two partitions: 40 records of keys k0-k9, then 20 of k0-k4, compacted
    to each key's latest (k5-k9's among the gaps of k0-k4's), then 6 more records past the cleaned
    offsets. Its survivors and log ends."""
    TopicAdmin(spark, root).create(T, 2)
    ctl = TopicController(spark, root)
    ctl.alter_config(T, ["cleanup.policy=compact"])
    producer = Producer(spark, root, T, "p")
    producer.send(make_records(spark, 40, keys=10))
    producer.send(make_records(spark, 20, keys=5, start=100))
    ctl.compact(T)
    assert sorted(c.partition for c in ctl.compact_keys(T)) == [0, 1]
    producer.send(make_records(spark, 6, keys=5, start=1000))
    kept = survivors(spark, root)
    ends = TopicAdmin(spark, root).log(T).log_end_offsets()
    assert len(kept) == 16 and sum(ends.values()) == 66, "gaps below the cleaned offsets, dense after"
    assert all(inner_gap(kept, p) is not None for p in (0, 1)), "gaps between survivors too"
    return kept, ends


def inner_gap(kept: list[tuple], partition: int) -> int | None:
    """An offset of ``partition`` compacted away between two survivors."""
    offsets = [r[1] for r in kept if r[0] == partition]
    return next((o for o in range(offsets[0], offsets[-1]) if o not in offsets), None)


def in_order(rows: list[tuple], partition: int) -> bool:
    offsets = [r[1] for r in rows if r[0] == partition]
    return offsets == sorted(offsets)


def _rows(table: pa.Table) -> list[tuple]:
    return [(r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"])) for r in table.to_pylist()]


def test_consumers_deliver_the_survivors_count_records_and_move_past_the_gaps(spark, root, compacted):
    kept, ends = compacted
    small = ConsumerSettings(max_records_per_batch=3)  # batches that start, end and lie inside gaps
    got: list[tuple] = []
    result = Consumer(spark, root, T, "arrow", small).run(ArrowHandler(lambda batch, _r: got.extend(_rows(batch))))
    assert sorted(got) == kept and all(in_order(got, p) for p in (0, 1))
    assert result.records == len(kept) and result.positions == ends
    assert GroupOffsets(spark, root).committed("arrow", T) == ends

    frames: list[tuple] = []
    handler = lambda df, _r: frames.extend(_rows(df.toArrow()))  # noqa: E731
    first = Consumer(spark, root, T, "frames", small).run(handler, max_records=4)
    assert first.records == 4 and len(frames) == 4, "max_records counts records, not offsets"
    rest = Consumer(spark, root, T, "frames", small).run(handler)
    assert rest.records == len(kept) - 4 and sorted(frames) == kept and rest.positions == ends

    got = []
    member = GroupConsumer(spark, root, T, "group", small)
    done = member.run(ArrowHandler(lambda batch, _r: got.extend(_rows(batch))))
    assert sorted(got) == kept and done.records == len(kept)
    assert GroupOffsets(spark, root).committed("group", T) == ends


def test_a_partition_read_from_inside_a_gap_starts_at_the_next_survivor(spark, root, compacted):
    kept, ends = compacted
    gap = inner_gap(kept, 0)
    after = [r for r in kept if r[0] == 0 and r[1] > gap]
    rows = read_partition(spark, root, T, 0, str(gap), max_records=2).to_pylist()
    assert [(r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"])) for r in rows] == after[:2]
    rows = read_partition(spark, root, T, 0, str(gap)).to_pylist()
    assert [r["offset"] for r in rows] == [r[1] for r in after]


@pytest.mark.parametrize("options", [{}, {"maxRecordsPerPartition": "2"}], ids=["spark-reads", "delta-rs-tasks"])
def test_format_lakelog_batch_reads_the_survivors_without_data_loss(lakelog, root, compacted, options):
    kept, ends = compacted
    reader = lakelog.read.format("lakelog").option("subscribe", T).option("failOnDataLoss", "true")
    for k, v in options.items():
        reader = reader.option(k, v)
    got = sorted((r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"])) for r in reader.load().collect())
    assert got == kept
    start, stop = inner_gap(kept, 0), inner_gap(kept, 1)  # both in gaps
    inside = reader.option("startingOffsets", f'{{"{T}": {{"0": {start}, "1": 0}}}}').option(
        "endingOffsets", f'{{"{T}": {{"0": {ends[0]}, "1": {stop}}}}}').load()
    assert sorted((r["partition"], r["offset"]) for r in inside.collect()) == \
        [(p, o) for p, o, _k, _v in kept if (p == 0 and o >= start) or (p == 1 and o < stop)]


@pytest.mark.long  # 35 s; the batch reads of the survivors stay in the default suite
def test_format_lakelog_streams_read_the_survivors(lakelog, root, compacted, tmp_path):
    from pipelines.spark.python_source import register

    kept, _ends = compacted
    assert register(lakelog, root, "lakelog_python")
    for fmt in ("lakelog", "lakelog_python"):
        sink, checkpoint = str(tmp_path / f"{fmt}-sink"), str(tmp_path / f"{fmt}-cp")
        query = (lakelog.readStream.format(fmt).option("subscribe", T).option("maxOffsetsPerTrigger", "7").option("startingOffsets", "earliest")
                 .option("failOnDataLoss", "true").load()
                 .writeStream.format("delta").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start(sink))
        assert query.awaitTermination(300) and query.exception() is None, query.exception()
        got = [(r["partition"], r["offset"], r["key"], r["value"]) for _v, rows in sink_batches(sink) for r in rows]
        assert sorted(got) == kept, fmt
        batch = lakelog.read.format(fmt).option("subscribe", T).option("maxRecordsPerPartition", "3").load()
        assert sorted((r["partition"], r["offset"], bytes(r["key"]), bytes(r["value"])) for r in batch.collect()) == kept


def test_the_audit_passes_a_compacted_partitions_gaps(spark, root, compacted, tmp_path):
    report = run_audit(spark, root, T, report_path=str(tmp_path / "audit.md"))
    dense = {c.name: c for c in report.checks}["log.offsets_dense"]
    assert dense.passed and dense.violations == 0 and Path(tmp_path / "audit.md").exists()


def test_only_the_dense_part_of_a_range_must_hold_a_record_per_offset():
    table = pa.table({"partition": pa.array([0, 0, 0, 1], pa.int32()), "offset": pa.array([3, 9, 10, 5], pa.int64())})
    assert missing_records(table, ((0, 0, 11), (1, 5, 6)), {0: 10}) == []
    assert missing_records(table, ((0, 0, 11),), {}) == [(0, 0, 11, 11, 3)], "no cleaned offset: gaps are losses"
    assert missing_records(table, ((0, 0, 12),), {0: 10}) == [(0, 10, 12, 2, 1)], "a gap past the cleaned offset"
