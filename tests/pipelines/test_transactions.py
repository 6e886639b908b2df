"""The producer's transactions (pipelines/transactions.py): sends to several topics and a group's
positions, committed on leaving the block, aborted on an exception; a zombie fenced. Read back by
read_committed and read_uncommitted consumers. Without a JVM: the session here may not start
(using it fails the test), as under ``LAKELOG_NO_JVM=1``."""

from __future__ import annotations

import pyarrow as pa
import pytest

from control_plane.group.offsets import GroupOffsets
from control_plane.topics import TopicAdmin
from control_plane.transactions.coordinator import TransactionCoordinator
from control_plane.transactions.rules import TxnState
from control_plane.transactions.state import InvalidTransactionStateError
from log_store.errors import InvalidRecordError, ProducerFencedError
from pipelines.consumer import ArrowHandler, Consumer
from pipelines.producer import Producer
from pipelines.settings import ConsumerSettings, ProducerSettings
from tests.support import no_jvm, spark  # noqa: F401 (fixtures: no JVM may start)


@pytest.fixture()
def root(spark, tmp_path):
    path = str(tmp_path / "root")
    admin = TopicAdmin(spark, path)
    admin.create("a", 3)
    admin.create("b", 2, layout="arrival")
    return path


def values(spark, root, topic: str, level: str = "read_committed", group: str | None = None) -> list[str]:
    got: list[str] = []
    consumer = Consumer(spark, root, topic, group or f"{level}-{topic}", ConsumerSettings(isolation_level=level))
    consumer.run(ArrowHandler(lambda batch, _r: got.extend(r["value"].decode() for r in batch.to_pylist())))
    return sorted(got)


def records(*vs: str) -> list[dict]:
    return [{"key": f"k{v}", "value": v} for v in vs]


def test_a_transaction_to_two_topics_appears_whole_at_its_commit(spark, root):
    producer = Producer(spark, root, "a")
    with producer.transaction(transactional_id="etl") as txn:
        txn.send(records("a1", "a2", "a3"))
        txn.send(pa.table({"key": ["x"], "value": [b"b1"]}), topic="b")
        assert values(spark, root, "a") == [] and values(spark, root, "b") == [], "nothing before the commit"
        assert values(spark, root, "a", "read_uncommitted") == ["a1", "a2", "a3"]
    assert values(spark, root, "a") == ["a1", "a2", "a3"] and values(spark, root, "b") == ["b1"]
    with producer.transaction(transactional_id="etl") as txn:  # the next one, at the raised epoch
        txn.send(records("a4"))
    assert values(spark, root, "a") == ["a4"], "the reader's group goes on from its positions"
    row = TransactionCoordinator(spark, root).table.get("etl")
    assert (row.state, row.epoch) == (TxnState.COMPLETE_COMMIT, 2)


def test_an_exception_in_the_block_aborts_the_transaction_and_propagates(spark, root):
    producer = Producer(spark, root, "a")
    with pytest.raises(ValueError, match="boom"):
        with producer.transaction(transactional_id="etl") as txn:
            txn.send(records("lost1", "lost2"))
            txn.send(records("lost3"), topic="b")
            raise ValueError("boom")
    with producer.transaction(transactional_id="etl") as txn:
        txn.send(records("kept"))
    assert values(spark, root, "a") == ["kept"] and values(spark, root, "b") == []
    assert values(spark, root, "a", "read_uncommitted") == ["kept", "lost1", "lost2"]
    assert TransactionCoordinator(spark, root).table.get("etl").state == TxnState.COMPLETE_COMMIT


def test_a_zombie_is_fenced_and_the_newer_instance_aborts_what_it_left_open(spark, root):
    zombie, newer = Producer(spark, root, "a"), Producer(spark, root, "a")
    old = zombie.transaction(transactional_id="etl")
    old.send(records("z1"))
    with newer.transaction(transactional_id="etl") as txn:  # InitProducerId: the zombie's transaction aborted
        txn.send(records("n1"))
    with pytest.raises(ProducerFencedError):
        old.send(records("z2"), topic="b")  # a partition it never wrote: AddPartitionsToTxn refuses it
    with pytest.raises(ProducerFencedError, match="fenced"):
        old.commit()
    with pytest.raises(ProducerFencedError, match="a new producer instance"):
        zombie.transaction(transactional_id="etl")
    assert values(spark, root, "a") == ["n1"] and values(spark, root, "b", "read_uncommitted") == []


def test_positions_sent_in_the_transaction_are_the_groups_only_on_commit(spark, root):
    producer, offsets = Producer(spark, root, "a"), GroupOffsets(spark, root)
    with pytest.raises(RuntimeError):
        with producer.transaction(transactional_id="etl") as txn:
            txn.send(records("x"))
            txn.send_offsets("g", {"b": {0: 3, 1: 4}})
            raise RuntimeError("failed downstream")
    assert offsets.committed("g", "b") == {}
    with producer.transaction(transactional_id="etl") as txn:
        txn.send(records("y"))
        txn.send_offsets("g", {"b": {0: 3, 1: 4}})
        assert offsets.committed("g", "b") == {}, "not before the commit"
    assert offsets.committed("g", "b") == {0: 3, 1: 4}


def test_a_batch_larger_than_batch_size_goes_in_several_appends_of_one_transaction(spark, root):
    producer = Producer(spark, root, "a", settings=ProducerSettings(batch_size=2))
    with producer.transaction(transactional_id="etl") as txn:
        results = txn.send(records(*(f"v{i}" for i in range(5))))
    assert len(results) == 3 and sum(r.appended for r in results) == 5
    assert values(spark, root, "a") == [f"v{i}" for i in range(5)]


def test_misuse_is_refused_clearly(spark, root):
    producer = Producer(spark, root, "a")
    txn = producer.transaction(transactional_id="etl")
    with pytest.raises(InvalidTransactionStateError, match="has a transaction open on this producer"):
        producer.transaction(transactional_id="etl")
    with pytest.raises(InvalidRecordError, match="convert them first"):
        txn.send([{"value": "v", "n": 1}])
    txn.commit()  # nothing sent: nothing to end
    with pytest.raises(InvalidTransactionStateError, match="has ended"):
        txn.send(records("late"))
    assert TransactionCoordinator(spark, root).table.get("etl").state == TxnState.EMPTY
