"""The guarantee, end to end: keyed producers, a controller growing and shrinking the topic, and
a three-member group consuming throughout, each its own OS process; the ordering audit passes.
The same run with gating switched off (a switch for tests only) must fail the audit.
"""

from __future__ import annotations

import time

import pytest

from control_plane.controller import TopicController
from control_plane.group.describe import ownership_violations
from control_plane.group.store import GroupTables
from control_plane.topics import TopicAdmin
from control_plane.settings import ControllerSettings
from log_store.log_metadata import Mode
from pipelines.audit import run_audit
from pipelines.gating import DISABLE_ENV
from tests.support import spawn_worker
from tests.processes.members import Member, wait_stable

T = "t"


def caught_up(spark, root: str, group: str) -> bool:
    log = TopicAdmin(spark, root).log(T)
    meta = log.metadata()
    ends = log.log_end_offsets()
    committed = GroupTables(spark, root).offsets.committed(group, T)
    return all(committed.get(p, 0) >= ends.get(p, 0) for p, pm in meta.partitions.items() if pm.mode is not Mode.NONE)


def resize_run(spark, root: str, tmp_path, gating: bool):
    """Members join first; the producer then writes 16 batches of 100 and the controller resizes
    after its 4th, 8th and 12th batch, so every resize lands while keys are being produced and
    the members still have a backlog on the old partitions."""
    TopicAdmin(spark, root).create(T, 4)
    controller = TopicController(spark, root, ControllerSettings(delete_partition_enable=True))
    env = {} if gating else {DISABLE_ENV: "1"}
    members = [Member(root, "g", m, "cooperative", "cooperative-sticky", tmp_path, batch=50, env=env) for m in "abc"]
    wait_stable(spark, root, "g", {"a", "b", "c"}, owned=4)
    producer = spawn_worker("append", root, T, "keyed", "0", "1600", "100", "24")
    resizes = {4: 6, 8: 8, 12: 5}
    for n, line in enumerate(producer.stdout, start=1):
        if n in resizes:
            controller.alter(T, resizes[n])
    assert producer.wait(timeout=600) == 0, producer.stderr.read()[-3000:]
    assert TopicAdmin(spark, root).get(T).undeleted_partition_count == 5
    deadline = time.time() + 900
    while not caught_up(spark, root, "g") and time.time() < deadline:
        time.sleep(2)
    for m in members:
        m.finish()
    assert caught_up(spark, root, "g")
    return run_audit(spark, root, T, str(tmp_path / "sink-g"))


@pytest.mark.slow
def test_per_key_order_survives_grow_and_shrink(spark, root, tmp_path):
    report = resize_run(spark, root, tmp_path, gating=True)
    assert report.passed, report.model_dump_json(indent=1)[:4000]
    history = TopicAdmin(spark, root)
    record = history.get(T)
    assert record.undeleted_partition_count == 5 and [p.mode for p in record.partitions][5:] == [Mode.READ_ONLY] * 3
    assert ownership_violations(spark, root, "g") == []


@pytest.mark.slow
def test_the_audit_catches_a_run_without_gating(spark, root, tmp_path):
    report = resize_run(spark, root, tmp_path, gating=False)
    assert not report.passed
    failed = [c for c in report.checks if not c.passed]
    assert any("order" in c.name for c in failed), [c.name for c in report.checks]
