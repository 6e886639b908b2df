"""Replicated topics with other OS processes (each with its own JVM) racing an election: a
producer paused between writing a batch's files at the leader and committing them, while this
process elects another root. The election's fence commit must make the paused commit fail, so no
record lands at the fenced root after it; the producer follows the topic to the new leader and
lands its batch there once. Read back with delta-rs at every root."""

from __future__ import annotations

import pytest

import json

from deltalake import DeltaTable

from control_plane.replication.operations import Replication
from control_plane.topics import TopicAdmin
from tests.support import pausing_at, resume, spawn_worker, while_paused


def sequences(path: str) -> list[int]:
    return sorted(DeltaTable(path).to_pyarrow_table(columns=["sequence"])["sequence"].to_pylist())


def test_a_producer_racing_an_election_never_lands_at_the_fenced_root(spark, tmp_path):
    eu, us = str(tmp_path / "eu"), str(tmp_path / "us")
    TopicAdmin(spark, eu).create("ha", 3, replicas=[eu, us])
    replication = Replication(spark, eu)
    state = replication.state("ha")
    old, new = replication.path(state, eu), replication.path(state, us)
    point = "produce:after_write@3"  # the third batch is written at eu, not committed
    producer = spawn_worker("append", eu, "ha", "px", "0", "100", "20", env=pausing_at(tmp_path, point))
    assert while_paused(producer, tmp_path, point), producer.stderr.read()[-3000:]
    fenced_at = len(DeltaTable(old).history())
    elected = replication.elect("ha", us)  # fences eu, catches us up from it, records epoch 1
    assert elected.leader == us and elected.leader_epoch == 1
    resume(tmp_path, point)
    out, err = producer.communicate(timeout=400)
    assert producer.returncode == 0, err[-3000:]
    batches = [json.loads(x) for x in out.splitlines()]
    assert batches[2]["refreshes"] >= 1, "the paused batch was fenced, refreshed and sent to the new leader"
    assert sequences(old) == list(range(40)), "only the two batches committed before the fence are at eu"
    assert all(json.loads(h.get("userMetadata") or "{}").get("lakelog") != "append"
               for h in DeltaTable(old).history()[: len(DeltaTable(old).history()) - fenced_at]), \
        "no append committed at eu after the election began"
    assert sequences(new) == list(range(100)), "every record once at the new leader"
    replication.replicate("ha")
    assert sequences(old) == list(range(100))  # the old leader, now a follower, catches up


def offsets_held(path: str) -> list[tuple[int, int]]:
    rows = DeltaTable(path).to_pyarrow_table(columns=["partition", "offset"]).to_pylist()
    return sorted((r["partition"], r["offset"]) for r in rows)


@pytest.mark.long
def test_two_replicators_racing_on_a_returning_follower_hold_each_offset_once(spark, tmp_path):
    """A returning old leader, truncated and copied by two replicators at once: one (another OS
    process) paused between its reads and its commit while this process's round commits. Its
    commit conflicts (the follower's log ends moved), and its retry finds nothing left."""
    import os

    from log_store.topic_log import TopicLog
    from pipelines.producer import Producer
    from tests.support import make_records

    eu, us = str(tmp_path / "eu"), str(tmp_path / "us")
    TopicAdmin(spark, eu).create("ha", 2, replicas=[eu, us])
    producer = Producer(spark, eu, "ha", "p")
    producer.send(make_records(spark, 20))
    replication = Replication(spark, eu)
    replication.replicate("ha")
    state = replication.state("ha")
    old = replication.path(state, eu)
    TopicLog(spark, old).append(producer.normalize(make_records(spark, 6, start=100)).selectExpr(
        "CAST(sequence % 2 AS INT) AS partition", "key", "value", "headers", "timestamp", "'zombie' AS producer_id",
        "sequence"), 2, "zombie")
    os.rename(old, old + ".away")
    elected = replication.elect("ha", us)
    producer.send(make_records(spark, 10, start=20))
    os.rename(old + ".away", old)
    point = "replicate:after_write@1"
    other = spawn_worker("replicate", eu, "ha", env=pausing_at(tmp_path, point))
    assert while_paused(other, tmp_path, point), other.stderr.read()[-3000:]
    replication.replicate("ha")  # this process's round truncates and copies first
    resume(tmp_path, point)
    out, err = other.communicate(timeout=400)
    assert other.returncode == 0, err[-3000:]
    new = replication.path(elected, us)
    held = offsets_held(old)
    assert held == offsets_held(new) and len(held) == len(set(held)) == 30, "each offset once, at both roots"
    assert sequences(old) == sequences(new) == list(range(30))


@pytest.mark.long
def test_a_layout_move_racing_an_append_keeps_the_log_readable_in_either_order(spark, tmp_path):
    """The move to the arrival layout against an append of another process, each paused just before
    its commit while the other commits: the loser conflicts and is made again in the layout the
    winner left. Every record stays readable once, in the arrival layout."""
    from control_plane.controller import TopicController

    root = str(tmp_path / "root")
    TopicAdmin(spark, root).create("t", 3)
    log = TopicAdmin(spark, root).log("t")
    # the append first: paused before its commit while the move commits
    point = "produce:after_write@1"
    producer = spawn_worker("append", root, "t", "pa", "0", "30", "30", env=pausing_at(tmp_path, point))
    assert while_paused(producer, tmp_path, point), producer.stderr.read()[-3000:]
    TopicController(spark, root).change_layout("t", "arrival")
    resume(tmp_path, point)
    _out, err = producer.communicate(timeout=400)
    assert producer.returncode == 0, err[-3000:]
    # then the move first: paused before its commit while an append commits
    TopicController(spark, root).change_layout("t", "partitioned")
    point = "layout:before_commit@1"
    mover = spawn_worker("change_layout", root, "t", "arrival", env=pausing_at(tmp_path, point))
    assert while_paused(mover, tmp_path, point), mover.stderr.read()[-3000:]
    from pipelines.producer import Producer
    from tests.support import make_records

    Producer(spark, root, "t", "pb").send(make_records(spark, 20))
    resume(tmp_path, point)
    _out, err = mover.communicate(timeout=400)
    assert mover.returncode == 0, err[-3000:]
    assert log.snapshot().layout == "arrival"
    rows = spark.read.format("delta").load(log.path).select("partition", "offset", "producer_id", "sequence").collect()
    assert len(rows) == 50 and len({(r["partition"], r["offset"]) for r in rows}) == 50
    assert sorted(r["sequence"] for r in rows if r["producer_id"] == "pa") == list(range(30))
    assert TopicController(spark, root).compact("t") is not None  # compaction and retention read it too


def test_a_following_replicator_rides_through_the_loss_of_the_leader_root(spark, tmp_path):
    """``lakelog replicate --follow`` already running when the leader's root is lost: its rounds fail
    and say so while no root leads, then follow the topic to the elected root and copy from it."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    from pipelines.producer import Producer
    from tests.support import PROJECT, make_records

    eu, us = str(tmp_path / "eu"), str(tmp_path / "us")
    TopicAdmin(spark, eu).create("ha", 2, replicas=[eu, us])
    conf = tmp_path / "conf.yaml"
    conf.write_text((PROJECT / "conf" / "local.yaml").read_text() + "replication:\n  interval_seconds: 0.5\n")
    follower = subprocess.Popen(
        [str(Path(sys.executable).parent / "lakelog"), "--root", eu, "--conf", str(conf), "replicate", "--topic", "ha",
         "--follow", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=PROJECT)
    try:
        producer = Producer(spark, eu, "ha", "p")
        producer.send(make_records(spark, 10))
        replication = Replication(spark, eu)
        state = replication.state("ha")
        old, new = replication.path(state, eu), replication.path(state, us)
        deadline = time.monotonic() + 300
        while (not os.path.isdir(new) or len(sequences(new)) < 10) and follower.poll() is None:
            assert time.monotonic() < deadline, "the follower never copied"
            time.sleep(0.5)
        os.rename(old, old + ".lost")  # the leader's root is lost under the running replicator
        time.sleep(2)
        assert follower.poll() is None, follower.stderr.read()[-3000:]
        replication.elect("ha", us)
        os.rename(old + ".lost", old)  # it returns, as a follower now
        producer.send(make_records(spark, 5, start=10))
        while sequences(old) != list(range(15)):
            assert follower.poll() is None, follower.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "the follower never copied from the new leader"
            time.sleep(0.5)
    finally:
        follower.terminate()
        _out, err = follower.communicate(timeout=60)
    assert "round" in err and ("cannot be read" in err or "lost" in err or "no topic log" in err), err[-2000:]
