"""Replicated topics with other OS processes (each with its own JVM) racing an election: a
producer paused between writing a batch's files at the leader and committing them, while this
process elects another root. The election's fence commit must make the paused commit fail, so no
record lands at the fenced root after it; the producer follows the topic to the new leader and
lands its batch there once. Read back with delta-rs at every root."""

from __future__ import annotations

import json

from deltalake import DeltaTable

from control_plane.replication import Replication
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
