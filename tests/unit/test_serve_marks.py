"""A group commit reads the marks of the producers it has not met in one read of the log, for
every batch it judges, a batch for a partition that is not writable included (it is judged as
any other and the log refuses it); producers it has met keep the marks it last saw (the append
checks them). Spark-free: the log is a stand-in counting its reads."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa

from serve.batcher import Batcher
from serve.commit_entries import Entry
from serve.producers import lakelog_producer_id
from serve.records import ProducedBatch
from serve.settings import ServeSettings


class _Ctx:
    settings = ServeSettings()

    def __init__(self, marks: dict[str, int]) -> None:
        self.marks = marks
        self.reads: list[list[str]] = []

    def producer_marks(self, path: str, ids: list[str]) -> dict[str, int]:
        self.reads.append(sorted(ids))
        return {pid: self.marks.get(pid, -1) for pid in ids}


def _entry(producer: int, partition: int, sequence: int, count: int = 2) -> Entry:
    batch = ProducedBatch(producer_id=producer, producer_epoch=0, base_sequence=sequence,
                          keys=pa.nulls(count, pa.binary()), values=pa.array([b"v"] * count, pa.binary()),
                          headers=pa.nulls(count), timestamps=pa.nulls(count))
    return Entry(topic="t", partition=partition, batch=batch, acks=1, future=None)


def _view(partitions: list[int], writable: list[int]) -> SimpleNamespace:
    return SimpleNamespace(snapshot=SimpleNamespace(metadata=SimpleNamespace(partitions={p: None for p in partitions},
                                                                         undeleted_partition_count=len(writable))),
                           writable=lambda: writable, record=SimpleNamespace(location="/log"), name="t")


def test_new_producers_marks_are_read_in_one_read_and_a_not_writable_partition_is_judged_too():
    known = lakelog_producer_id(7, 0)
    ctx = _Ctx({known: 3})
    batcher = Batcher(ctx)
    view = _view([0, 1, 2], writable=[0, 1])  # partition 2: in the metadata, not writable (above the count)
    todo = [_entry(7, 0, 4), _entry(8, 1, 0), _entry(9, 2, 0), _entry(8, 5, 0)]  # 5: not a partition
    outcomes: dict = {}
    accepted, expected = batcher.judging.judge(view, batcher._place(view, todo, outcomes), outcomes)
    assert ctx.reads == [sorted([known, lakelog_producer_id(8, 1), lakelog_producer_id(9, 2)])]
    assert [e.partition for e in accepted] == [0, 1, 2]
    assert expected == {known: 3, lakelog_producer_id(8, 1): -1, lakelog_producer_id(9, 2): -1}
    assert [o.error for o in outcomes.values()] == ["UNKNOWN_TOPIC_OR_PARTITION"]

    ctx.marks[known] = 100  # another server wrote meanwhile: this one keeps what it saw until the append says
    again, expected = batcher.judging.judge(view, batcher._place(view, [_entry(7, 0, 4), _entry(10, 0, 0)], {}), {})
    assert ctx.reads[1:] == [[lakelog_producer_id(10, 0)]]
    assert expected[known] == 3 and len(again) == 2


def test_a_batch_refused_on_a_remembered_mark_is_judged_again_on_the_logs():
    """Another server wrote sequences 4-100 for producer 7 on partition 0 (its leader moved there
    and back); this server still remembers 3. The next batch (101) is appended after the log's
    mark, not refused OUT_OF_ORDER_SEQUENCE_NUMBER; a real gap is still refused, after one read."""
    known = lakelog_producer_id(7, 0)
    ctx = _Ctx({known: 3})
    batcher = Batcher(ctx)
    view = _view([0], writable=[0])
    batcher.judging.judge(view, batcher._place(view, [_entry(7, 0, 4)], {}), {})
    ctx.marks[known] = 100
    accepted, expected = batcher.judging.judge(view, batcher._place(view, [_entry(7, 0, 101)], {}), outcomes := {})
    assert (len(accepted), expected, outcomes) == (1, {known: 100}, {})
    assert ctx.reads[-1] == [known]
    reads = len(ctx.reads)
    accepted, _ = batcher.judging.judge(view, batcher._place(view, [_entry(7, 0, 150)], {}), outcomes := {})
    assert accepted == [] and [o.error for o in outcomes.values()] == ["OUT_OF_ORDER_SEQUENCE_NUMBER"]
    assert len(ctx.reads) == reads + 1
