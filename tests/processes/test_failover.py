"""A failover in the middle of producing, with two producer processes (``acks: all``) and a group
member running, and the old leader's return.

The leader root is lost mid-run (its log's folder is a symlink, pointed nowhere: reads and writes
there fail), the in-sync follower is elected, the producers follow the topic to it, the old root
comes back still believing it leads and is truncated and caught up by ``replicate``. Then:
every root holds the same records at the same offsets (read with delta-rs at each root), nothing
a producer was acknowledged is lost or doubled and the group's sink is in order (the campaign's
checker), and the audit passes on the sink.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from chaos.crashpoints import TOPIC, Scene
from chaos.host import GATEWAY_ENV
from control_plane.replication.operations import Replication
from control_plane.topics import TopicAdmin
from pipelines.audit.run import run_audit


def records(path: str) -> list[tuple]:
    table = DeltaTable(path).to_pyarrow_table(columns=["partition", "offset", "leader_epoch", "producer_id", "sequence"])
    return sorted(tuple(r.values()) for r in table.to_pylist())


def acked_batches(scene: Scene, pid: str) -> int:
    acks = scene.dir / f"{pid}.acks"
    return len(acks.read_text().splitlines()) if acks.exists() else 0


@pytest.mark.slow  # 75 s; the election racing a producer in another process stays in test_replica_races.py
def test_a_failover_mid_produce_loses_no_acknowledged_record_and_every_root_agrees(spark, tmp_path):
    scene = Scene(point="failover", dir=tmp_path, gateway=os.environ[GATEWAY_ENV])
    eu, us = str(tmp_path / "eu"), str(tmp_path / "us")
    TopicAdmin(spark, scene.root).create(TOPIC, 3, replicas=[eu, us])
    replication = Replication(spark, scene.root)
    state = replication.state(TOPIC)
    link, real = Path(replication.path(state, eu)), tmp_path / "eu-log"
    link.rename(real)
    link.symlink_to(real)  # the leader's log, behind a link that can be cut

    producers = {pid: scene.produce(pid, n=300, batch=20, wait=False, acks="all") for pid in ("p0", "p1")}
    member = scene.member("g", "g-a", wait=False, idle_s=1e9, batch=60)
    deadline = time.monotonic() + 300
    while min(acked_batches(scene, p) for p in producers) < 3 and time.monotonic() < deadline:
        replication.replicate(TOPIC)
        time.sleep(0.5)
    link.unlink()
    link.symlink_to(tmp_path / "nowhere")  # the leader's root is lost
    elected = replication.elect(TOPIC, us)
    assert (elected.leader, elected.in_sync) == (us, [us])
    for _ in range(3):
        replication.replicate(TOPIC)  # the lost root cannot be copied to: out of the in-sync set
        time.sleep(1)
    link.unlink()
    link.symlink_to(real)  # it returns, still holding the role of leader at epoch 0

    for pid, proc in producers.items():  # cut off mid-batch, each backs off, follows the topic and finishes
        assert proc.wait(timeout=600) == 0, scene.stderr_tail(pid) if hasattr(scene, "stderr_tail") else pid
    assert all(acked_batches(scene, p) == 15 for p in producers), "every batch acknowledged, once"
    outcome = [scene.events(p)[-1] for p in producers]
    assert sum(o["refreshes"] for o in outcome) >= 1, outcome  # (a retried batch may find itself copied: duplicates)
    for _ in range(2):
        report = replication.replicate(TOPIC)
    assert report.in_sync == [us, eu] or set(report.in_sync) == {us, eu}, report
    scene.wait_for("the group to drain", lambda: _drained(scene), timeout=240)
    (tmp_path / "stop-g").write_text("stop")
    assert member.wait(timeout=120) == 0

    leader, follower = records(str(real)), records(replication.path(state, us))
    assert leader == follower and len({(r[0], r[1]) for r in leader}) == len(leader) == 600
    scene.check()  # acknowledged records present once, sinks in order and complete
    assert not scene.problems, scene.problems
    audit = run_audit(spark, scene.root, TOPIC, scene.groups["g"], group="g")
    assert audit.passed, json.dumps([c.model_dump(mode="json") for c in audit.checks if not c.passed])[:2000]


def _drained(scene: Scene) -> bool:
    from chaos.tables import drain_gap

    return drain_gap(scene.root, TOPIC, "g") is None
