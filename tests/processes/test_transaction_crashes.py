"""A read-process-write group killed at each crash point of a transaction (log_store/crash.py)
and started again: read_committed readers of both output topics get every input record exactly
once, and the group's positions stand at the input's end. The worker is
``chaos.actors.txn_copy`` (``tests/processes/txn_workers.py``); every process runs without a JVM (``LAKELOG_NO_JVM=1``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from control_plane.group.offsets import GroupOffsets
from control_plane.topics import TopicAdmin
from control_plane.transactions.coordinator import TransactionCoordinator
from log_store.crash import CRASH_ENV, CRASH_EXIT_CODE
from pipelines.consumer import ArrowHandler, Consumer
from pipelines.producer import Producer
from pipelines.settings import ConsumerSettings
from tests.support import no_jvm, spark  # noqa: F401 (fixtures: no JVM may start)

PROJECT = Path(__file__).resolve().parents[2]
WORKER = PROJECT / "tests" / "processes" / "txn_workers.py"
RECORDS = 23


def worker(root: str, crash_at: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "LAKELOG_NO_JVM": "1", "PYTHONPATH": str(PROJECT)}
    env.pop(CRASH_ENV, None)
    if crash_at:
        env[CRASH_ENV] = crash_at
    return subprocess.run([sys.executable, str(WORKER), root, "copier", "g", "5"], capture_output=True, text=True,
                          timeout=300, cwd=PROJECT, env=env)


def committed_values(spark, root: str, topic: str) -> list[str]:
    got: list[str] = []
    consumer = Consumer(spark, root, topic, f"check-{topic}", ConsumerSettings(isolation_level="read_committed"))
    consumer.run(ArrowHandler(lambda batch, _r: got.extend(r["value"].decode() for r in batch.to_pylist())))
    return got


@pytest.mark.parametrize("crash_at", [
    "txn:after_add_partitions@3", "txn:after_append@2", "txn:after_append@4", "txn:after_decision@2",
    "txn:after_topic_markers@3", "txn:after_positions@2", "produce:after_commit@3",
])
def test_a_read_process_write_group_killed_at_a_crash_point_delivers_exactly_once(spark, tmp_path, crash_at):
    root = str(tmp_path / "root")
    admin = TopicAdmin(spark, root)
    admin.create("in", 2)
    admin.create("out1", 3)
    admin.create("out2", 1, layout="arrival")
    source = Producer(spark, root, "in")
    source.send(__import__("pyarrow").table({"key": [f"k{i % 5}" for i in range(RECORDS)],
                                             "value": [f"v{i}" for i in range(RECORDS)]}))
    killed = worker(root, crash_at)
    assert killed.returncode == CRASH_EXIT_CODE, killed.stderr[-2000:]
    again = worker(root)
    assert again.returncode == 0, again.stderr[-2000:]
    expected = sorted(f"v{i}" for i in range(RECORDS))
    for topic, suffix in (("out1", "-0"), ("out2", "-1")):
        got = committed_values(spark, root, topic)
        assert sorted(v.removesuffix(suffix) for v in got) == expected, f"{topic}: each record exactly once"
    positions = GroupOffsets(spark, root).committed("g", "in")
    assert positions == TopicAdmin(spark, root).log("in").log_end_offsets()
    assert TransactionCoordinator(spark, root).tick() == [], "nothing left open or undecided"
