"""format("lakelog") streams in their own processes, killed and restarted.

- A stream (group option on) reads while this process produces and grows, shrinks and grows the
  topic; it is killed with SIGKILL mid-run and restarted from its checkpoint: its Delta sink holds
  every record once, each key in order, and ``groups describe`` showed its lag meanwhile.
- A stream writing to a topic dies right after a micro-batch landed in the log, before Spark
  recorded it: the restarted query replays the batch, which lands nothing twice.
Sinks and logs are read with delta-rs and pyarrow, not through lakelog.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from control_plane.controller import TopicController
from control_plane.group.offsets import GroupOffsets
from control_plane.settings import ControllerSettings
from control_plane.topics import TopicAdmin
from log_store.crash import CRASH_ENV
from pipelines.audit import run_audit
from pipelines.producer import Producer
from tests.pipelines.spark.test_source import cross_partition_batches, order_violations, sink_batches
from tests.processes.workers import ATTACH_ENV
from tests.support import PROJECT, WORKERS, log_rows, make_records

T = "events"


def stream_worker(*args: str, env: dict[str, str] | None = None, attach: bool = False) -> subprocess.Popen:
    """A stream in its own process: its own JVM (to be killed, or to crash in its own Python
    worker), or ``attach``-ed to this test run's JVM (0.4 s to start instead of 15 s)."""
    env = {**os.environ, **(env or {}), ATTACH_ENV: "1" if attach else "0"}
    return subprocess.Popen([sys.executable, str(WORKERS / "stream_workers.py"), *args], cwd=PROJECT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_for_batches(proc: subprocess.Popen, n: int, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    seen = 0
    while seen < n:
        line = proc.stdout.readline()
        assert line or proc.poll() is None, f"the stream ended early:\n{proc.stderr.read()[-3000:]}"
        if '"batch"' in line and '"rows": 0' not in line:
            seen += 1
        assert time.monotonic() < deadline, "the stream made no progress"


@pytest.mark.slow  # 55 s; a stream restarted from its checkpoint stays in tests/pipelines/spark/test_stream_life.py
def test_a_killed_stream_restarts_from_its_checkpoint_through_resizes(spark, root, tmp_path):
    TopicAdmin(spark, root).create(T, 2)
    producer = Producer(spark, root, T, "p")
    producer.send(make_records(spark, 300, keys=12))
    sink, ck = str(tmp_path / "sink"), str(tmp_path / "ck")
    args = ("read", root, T, sink, ck, "100", "streamers")
    proc = stream_worker(*args, "0.5 seconds")
    try:
        wait_for_batches(proc, 2)
        controller = TopicController(spark, root, ControllerSettings(delete_partition_enable=True))
        controller.alter(T, 4)
        producer.send(make_records(spark, 200, keys=12, start=300))
        lags = [r.lag for r in GroupOffsets(spark, root).describe("streamers")]
        controller.alter(T, 3)
        producer.send(make_records(spark, 200, keys=12, start=500))
        wait_for_batches(proc, 2)
        proc.send_signal(signal.SIGKILL)  # mid-run: a batch may be half written
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert sum(lags) > 0, "groups describe showed the stream's lag"

    def catch_up() -> None:
        done = stream_worker(*args, "availableNow", attach=True)
        _out, err = done.communicate(timeout=300)
        assert done.returncode == 0, err[-3000:]

    catch_up()  # from the checkpoint: drains the marked partition ...
    assert [r.retired for r in controller.tick(T, delete_delay=3600)] == [[3]], "... so the controller retires it"
    controller.alter(T, 5)
    producer.send(make_records(spark, 100, keys=12, start=700))
    catch_up()
    batches = sink_batches(sink)
    values = sorted(int(r["value"]) for _v, rows in batches for r in rows)
    assert values == list(range(800)), "every record once, none twice"
    assert order_violations(batches) == [] and cross_partition_batches(batches) == []
    assert run_audit(spark, root, T, sink, group="streamers").passed
    assert all(r.lag == 0 for r in GroupOffsets(spark, root).describe("streamers"))


@pytest.mark.slow  # 35 s; the default suite has the JVM sink's replay rule (unit/test_stream_sink_rules.py) and the Python sink's replay (test_python_write.py)
def test_a_micro_batch_replayed_after_a_crash_lands_once(spark, root, tmp_path):
    TopicAdmin(spark, root).create(T, 3)
    source, ck = str(tmp_path / "source"), str(tmp_path / "ck")
    for start in range(0, 400, 100):
        make_records(spark, 100, keys=9, start=start).coalesce(1).write.format("delta").mode("append").save(source)
    crashed = stream_worker("write", root, T, source, ck, env={CRASH_ENV: "spark_sink:after_produce@2"})
    out, err = crashed.communicate(timeout=300)
    assert crashed.returncode != 0, "the query died with its Python worker"
    landed = sorted(int(r["value"]) for r in log_rows(root, T))
    assert landed == list(range(200)), "two micro-batches landed, Spark recorded one"
    rerun = stream_worker("write", root, T, source, ck, attach=True)
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err[-3000:]
    assert sorted(int(r["value"]) for r in log_rows(root, T)) == list(range(400)), "the replay landed nothing twice"
