"""A group commit fails unit by unit (serve.batcher): an entry that cannot be taken fails its unit
(a partition's batches of one request) and no other, a unit is appended all or none, and an entry
once appended is never answered with an error. Spark-free: the log is a stand-in that appends."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
import pytest

import serve.batcher as batcher_module
from serve.batcher import Batcher, Entry
from serve.records import ProducedBatch
from serve.settings import ServeSettings


class _Log:
    """Appends every row it is given to partition 0 from offset 0; remembers the values."""

    appended: list[bytes] = []

    def __init__(self, _spark, _path) -> None:
        pass

    def append_rows(self, rows: pa.Table, _count: int, _marks: dict):
        _Log.appended.extend(rows.column("value").to_pylist())
        return SimpleNamespace(ranges={0: (0, rows.num_rows)}, version=None)


class _Ctx:
    settings = ServeSettings()
    spark = None

    def __init__(self) -> None:
        meta = SimpleNamespace(partitions={0: None}, undeleted_partition_count=1)
        self.topic = SimpleNamespace(name="t", record=SimpleNamespace(location="/log"), leadership=None,
                                     writable=lambda: [0], snapshot=SimpleNamespace(
                                         metadata=meta, earliest_offsets=lambda: {0: 0}))

    def view(self, _topic):
        return self.topic

    def forget(self, _path) -> None:
        pass

    def producer_marks(self, _path, ids):
        return {pid: -1 for pid in ids}

    def replicated(self, _topic) -> bool:
        return False

    def placement(self, _view) -> str:
        return "key"


def _entry(values: list[bytes], producer: int = -1, sequence: int = -1) -> Entry:
    n = len(values)
    batch = ProducedBatch(producer_id=producer, producer_epoch=0 if producer >= 0 else -1, base_sequence=sequence,
                          keys=pa.nulls(n, pa.binary()), values=pa.array(values, pa.binary()),
                          headers=pa.nulls(n), timestamps=pa.nulls(n, pa.timestamp("us")))
    return Entry(topic="t", partition=0, batch=batch, acks=1, future=None)


@pytest.fixture()
def batcher(monkeypatch) -> Batcher:
    monkeypatch.setattr(batcher_module, "TopicLog", _Log)
    _Log.appended = []
    return Batcher(_Ctx())


def test_an_entry_of_no_records_fails_alone_and_the_others_are_appended_and_answered(batcher):
    first, empty, last = _entry([b"a", b"b"]), _entry([]), _entry([b"c"])
    outcomes = batcher.commit("t", [first, empty, last])
    assert [(o.error, o.base_offset) for o in outcomes] == [("NONE", 0), ("INVALID_RECORD", -1), ("NONE", 2)]
    assert _Log.appended == [b"a", b"b", b"c"]


def test_a_failure_after_the_append_leaves_the_appended_entries_answered_without_an_error(batcher, monkeypatch):
    def broken(*_args):
        raise RuntimeError("a bug computing offsets")

    monkeypatch.setattr(batcher_module, "base_offsets", broken)
    outcomes = batcher.commit("t", [_entry([b"a"]), _entry([b"b"])])
    assert [o.error for o in outcomes] == ["NONE", "NONE"] and _Log.appended == [b"a", b"b"]


def test_a_unit_is_appended_all_or_none(batcher):
    one, gap = _entry([b"a"], producer=4, sequence=0), _entry([b"b"], producer=4, sequence=5)
    gap.unit = one.unit  # one request's two batches for the partition
    other = _entry([b"c"], producer=9, sequence=0)
    outcomes = batcher.commit("t", [one, gap, other])
    assert [o.error for o in outcomes] == ["OUT_OF_ORDER_SEQUENCE_NUMBER"] * 2 + ["NONE"]
    assert _Log.appended == [b"c"]
    again = _entry([b"a"], producer=4, sequence=0)  # the producer's mark went back with the unit
    assert batcher.commit("t", [again])[0].error == "NONE" and _Log.appended == [b"c", b"a"]
