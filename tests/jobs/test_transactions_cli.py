"""``lakelog transactions list / describe / abort`` (Kafka's kafka-transactions.sh), ``controller
tick`` finishing a decided transaction, and ``sql`` over the ``transactions`` views: real
``lakelog`` processes with ``LAKELOG_NO_JVM=1``; the transactions are made in this process,
without a JVM too."""

from __future__ import annotations

import json

import pytest

from control_plane.topics import TopicAdmin
from control_plane.transactions.coordinator import TransactionCoordinator
from control_plane.transactions.state import decided
from log_store.errors import ProducerFencedError
from pipelines.producer import Producer
from tests.jobs.test_no_jvm import lakelog
from tests.support import no_jvm, spark  # noqa: F401 (fixtures: no JVM may start)


@pytest.fixture()
def root(spark, tmp_path):
    path = str(tmp_path / "root")
    TopicAdmin(spark, path).create("a", 2)
    TopicAdmin(spark, path).create("b", 1)
    return path


def test_list_and_describe_show_each_ids_state_and_its_pending_positions(spark, root):
    producer = Producer(spark, root, "a")
    with producer.transaction(transactional_id="done") as txn:
        txn.send([{"key": "k", "value": "v"}])
    open_txn = producer.transaction(transactional_id="open")
    open_txn.send([{"key": "k", "value": "v"}], topic="b")
    open_txn.send_offsets("g", {"a": {0: 4, 1: 2}})
    listed = json.loads(lakelog(root, "transactions", "list", "--json").stdout)
    assert [(r["transactional_id"], r["state"], r["epoch"]) for r in listed] == [
        ("done", "CompleteCommit", 1), ("open", "Ongoing", 0)]
    assert listed[1]["partitions"] == "b:0" and listed[1]["group"] == "g"
    described = json.loads(lakelog(root, "transactions", "describe", "--transactional-id", "open", "--json").stdout)
    assert described["state"] == "Ongoing" and described["partitions"] == {"b": [0]}
    assert described["pending_positions"] == [{"topic": "a", "partition": 0, "offset": 4},
                                              {"topic": "a", "partition": 1, "offset": 2}]
    assert [h["state"] for h in described["history"]] == ["Empty", "Ongoing", "Ongoing", "Ongoing"]
    done = json.loads(lakelog(root, "transactions", "describe", "--transactional-id", "done", "--json").stdout)
    assert done["ended_producer_id"] == done["producer_id"] and done["ended_epoch"] == 0
    text = lakelog(root, "transactions", "describe", "--transactional-id", "open").stdout
    assert "Ongoing" in text and "a:0=4, a:1=2" in text
    assert "open" in lakelog(root, "transactions", "list").stdout
    rows = json.loads(lakelog(root, "sql", "SELECT transactional_id, state FROM transactions ORDER BY 1", "--json").stdout)
    assert rows == [{"transactional_id": "done", "state": "CompleteCommit"},
                    {"transactional_id": "open", "state": "Ongoing"}]
    versions = json.loads(lakelog(root, "sql", "SELECT count(*) AS n FROM transaction_history", "--json").stdout)
    assert versions == [{"n": 4 + 4}], "every version kept"


def test_abort_ends_a_hung_transaction_and_fences_its_producer(spark, root):
    producer = Producer(spark, root, "a")
    hung = producer.transaction(transactional_id="etl")
    hung.send([{"key": "k", "value": "hung"}])
    aborted = json.loads(lakelog(root, "transactions", "abort", "--transactional-id", "etl", "--json").stdout)
    assert (aborted["state"], aborted["epoch"]) == ("CompleteAbort", 1)
    with pytest.raises(ProducerFencedError):
        hung.commit()
    got = lakelog(root, "consume", "--topic", "a", "--group", "r", "--from-beginning", "--idle-timeout", "1",
                  "--isolation-level", "read_committed", "--json").stdout
    assert [line for line in got.splitlines() if line.startswith("{")] == []


def test_bad_input_is_refused_with_a_clear_error_and_exit_1(spark, root):
    proc = lakelog(root, "transactions", "describe", "--transactional-id", "nope", check=False)
    assert proc.returncode == 1 and "unknown transactional id 'nope'" in proc.stderr
    proc = lakelog(root, "transactions", "abort", "--transactional-id", "nope", check=False)
    assert proc.returncode == 1 and "unknown transactional id 'nope'" in proc.stderr
    with Producer(spark, root, "a").transaction(transactional_id="done") as txn:
        txn.send([{"key": "k", "value": "v"}])
    proc = lakelog(root, "transactions", "abort", "--transactional-id", "done", check=False)
    assert proc.returncode == 1 and "nothing to abort" in proc.stderr
    proc = lakelog(root, "transactions", "describe", check=False)
    assert proc.returncode == 2 and "--transactional-id" in proc.stderr
    assert json.loads(lakelog(root, "transactions", "list", "--json").stdout)[0]["transactional_id"] == "done"


def test_controller_tick_finishes_a_decision_its_producer_left(spark, root):
    coord = TransactionCoordinator(spark, root)
    producer = Producer(spark, root, "a")
    txn = producer.transaction(transactional_id="etl")
    txn.send([{"key": "k", "value": "decided"}])
    assert coord.table.record(decided(coord.table.get("etl"), 0, commit=True))  # then the producer died
    lakelog(root, "controller", "tick")
    assert coord.table.get("etl").state.value == "CompleteCommit"
    got = lakelog(root, "consume", "--topic", "a", "--group", "r", "--from-beginning", "--idle-timeout", "1",
                  "--isolation-level", "read_committed", "--json").stdout
    assert [json.loads(line)["value"] for line in got.splitlines() if line.startswith("{")] == ["decided"]


def test_watch_aborts_a_hung_transaction_after_its_timeout_and_only_then(spark, root):
    """``transactions watch`` is the timeout's observer without a server: a transaction left open
    by its producer is aborted once the watcher saw it unchanged for its timeout, not before; a
    read_committed reader then reads past it."""
    producer = Producer(spark, root, "a")
    hung = producer.transaction(transactional_id="slow", timeout_ms=60_000)
    hung.send([{"key": "k", "value": "slow"}])
    quick = Producer(spark, root, "a").transaction(transactional_id="etl", timeout_ms=1_000)
    quick.send([{"key": "k", "value": "hung"}])
    out = lakelog(root, "transactions", "watch", "--interval", "0.2", "--for", "6", "--json").stdout
    moved = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [(m["transactional_id"], m["state"]) for m in moved] == [("etl", "CompleteAbort")]
    with pytest.raises(ProducerFencedError):
        quick.commit()
    states = {r["transactional_id"]: r["state"] for r in json.loads(lakelog(root, "transactions", "list", "--json").stdout)}
    assert states == {"slow": "Ongoing", "etl": "CompleteAbort"}
    proc = lakelog(root, "transactions", "watch", "--interval", "0", check=False)
    assert proc.returncode == 2 and "--interval" in proc.stderr
