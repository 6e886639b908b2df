"""A group commit fails unit by unit (serve.batcher): an entry that cannot be taken fails its unit
(a partition's batches of one request) and no other, a unit is appended all or none, and an entry
once appended is never answered with an error. Spark-free: the log is a stand-in that appends."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
import pytest

import serve.batcher as batcher_module
from serve.batcher import Batcher
from serve.commit_entries import Entry
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


class _Replication:
    """Every acknowledgement refused: a follower behind."""

    def acknowledge(self, *_args) -> None:
        from log_store.errors import NotEnoughReplicasError

        raise NotEnoughReplicasError("the follower could not take the records")


@pytest.fixture()
def replicated(batcher) -> Batcher:
    ctx = batcher.ctx
    ctx.topic.leadership = SimpleNamespace(leader_epoch=0)
    ctx.replicated = lambda _topic: True
    ctx.replication = lambda: _Replication()
    return batcher


def _all(entry: Entry) -> Entry:
    entry.acks = -1
    return entry


@pytest.mark.parametrize("refusal", ["a lost root", "another server's marks"])
def test_a_retry_answered_as_a_duplicate_waits_for_the_replicas_whatever_its_commit_meets(replicated, monkeypatch,
                                                                                          refusal):
    """acks=all: a batch appended and not copied is answered NOT_ENOUGH_REPLICAS_AFTER_APPEND; its
    retry, a duplicate, shares a commit with another client's batch whose append fails (the leader
    root lost) or is refused once (another server committed for one of its producers). The
    duplicate is never answered as acknowledged without the wait for the replicas."""
    from log_store.errors import StaleProducerSequenceError, StorageError

    first = replicated.commit("t", [_all(_entry([b"a"], producer=4, sequence=0))])
    assert first[0].error == "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
    appends = []
    original = _Log.append_rows

    def refusing(self, rows, count, marks):
        appends.append(1)
        if refusal == "a lost root":
            raise StorageError("the root /eu is lost")
        if len(appends) == 1:
            raise StaleProducerSequenceError("another server committed", marks={})
        return original(self, rows, count, marks)

    monkeypatch.setattr(_Log, "append_rows", refusing)
    retry, other = _all(_entry([b"a"], producer=4, sequence=0)), _all(_entry([b"b"], producer=9, sequence=0))
    outcomes = replicated.commit("t", [retry, other])
    assert outcomes[0].error != "NONE", "the duplicate was acknowledged without its records on every in-sync root"
    assert outcomes[0].error == outcomes[1].error, outcomes


def test_a_producers_marks_unreadable_from_a_lost_root_answer_the_commit_retriably(batcher, monkeypatch):
    """A producer the server does not know has its mark read from the log: with the root lost,
    every entry of the commit is answered as for a lost root (retriable), not UNKNOWN_SERVER_ERROR."""
    from log_store.errors import StorageError

    def lost(_path, _ids):
        raise StorageError("the root /eu is lost")

    monkeypatch.setattr(batcher.ctx, "producer_marks", lost, raising=False)
    outcomes = batcher.commit("t", [_entry([b"a"], producer=4, sequence=0), _entry([b"b"])])
    assert [o.error for o in outcomes] == ["KAFKA_STORAGE_ERROR"] * 2 and _Log.appended == []


@pytest.mark.parametrize("replicated, code", [(True, "NOT_LEADER_OR_FOLLOWER"), (False, "KAFKA_STORAGE_ERROR")])
def test_a_topic_whose_limits_cannot_be_read_from_a_lost_root_is_answered_retriably(replicated, code):
    """The topic's max.message.bytes is read again every second: from a lost root, the produce is
    answered as the commit answers a lost root, not UNKNOWN_TOPIC_OR_PARTITION."""
    from log_store.errors import StorageError
    from serve.apis.produce import _prepare

    def lost(_topic):
        raise StorageError("no topic log at /eu/topics/t: its root is lost or not mounted")

    server = SimpleNamespace(settings=ServeSettings(), batcher=SimpleNamespace(
        limits=SimpleNamespace(max_message_bytes=lost), ctx=SimpleNamespace(replicated=lambda _t: replicated)))
    [outcome] = _prepare(server, {"t": True}, [("t", 0, b"")])
    assert outcome.error == code
