"""Several OS processes racing on one topic, and a producer killed mid-run (invariants 1-4)."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from control_plane.topics import TopicAdmin
from log_store.partitioner import partition_for
from tests.processes.workers import ATTACH_ENV, send_batches, set_count
from control_plane.controller import TopicController
from control_plane.settings import ControllerSettings
from tests.support import PROJECT, WORKERS, pausing_at, resume, spawn_worker, while_paused


def _log_rows(spark, admin, topic):
    return admin.log(topic).table().select("partition", "offset", "key", "sequence", "producer_id").collect()


@pytest.mark.long
def test_processes_appending_to_one_partition_get_dense_unique_offsets(spark, root):
    admin = TopicAdmin(spark, root)
    admin.create("race", 1)
    procs = [spawn_worker("append", root, "race", f"w{i}", "0", "40", "20") for i in range(3)]
    acked = {}
    for i, proc in enumerate(procs):
        out, err = proc.communicate(timeout=400)
        assert proc.returncode == 0, err[-3000:]
        acked[f"w{i}"] = sum(json.loads(line)["appended"] for line in out.splitlines())
    rows = _log_rows(spark, admin, "race")
    offsets = sorted(r["offset"] for r in rows)
    assert offsets == list(range(120)), "offsets must be unique and dense"
    for pid, n in acked.items():
        mine = sorted(r["sequence"] for r in rows if r["producer_id"] == pid)
        assert mine == list(range(40)) and n == 40, f"every acknowledged record of {pid} is present once"
    # per producer, offsets follow sequence order
    for pid in acked:
        seqs = [r["sequence"] for r in sorted(rows, key=lambda r: r["offset"]) if r["producer_id"] == pid]
        assert seqs == sorted(seqs)


@pytest.mark.long
def test_stale_producer_is_rejected_refreshes_and_lands_in_right_partitions(spark, root, tmp_path):
    admin = TopicAdmin(spark, root)
    admin.create("grow", 3)
    point = "produce:after_write@3"  # the third batch is written under 3 partitions, not committed
    producer = spawn_worker("append", root, "grow", "px", "0", "200", "20", "50", env=pausing_at(tmp_path, point))
    assert while_paused(producer, tmp_path, point), producer.stderr.read()[-3000:]
    set_count(spark, root, "grow", 5)  # another process (this one, its own JVM), the controller, commits meanwhile
    resume(tmp_path, point)
    out, err = producer.communicate(timeout=400)
    assert producer.returncode == 0, err[-3000:]
    refreshes = [json.loads(x)["refreshes"] for x in out.splitlines()]
    assert refreshes[2] == 1 and sum(refreshes) == 1, "the stale batch was rejected, refreshed and retried"
    rows = _log_rows(spark, admin, "grow")
    assert sorted(r["sequence"] for r in rows) == list(range(200))
    log = admin.log("grow")
    meta = log.metadata()
    assert meta.undeleted_partition_count == 5
    # every record is in partition_for(key, count) for the count it was committed under
    by_epoch = log.table().select("partition", "key", "leader_epoch").collect()
    for r in by_epoch:
        count = 3 if (r["leader_epoch"] == 0 and r["partition"] < 3) else 5
        assert r["partition"] == partition_for(bytes(r["key"]), count)
    assert any(r["partition"] >= 3 for r in by_epoch), "records after the change use the new count"


@pytest.mark.long
def test_killed_producer_rerun_with_same_id_loses_and_duplicates_nothing(spark, root):
    admin = TopicAdmin(spark, root)
    admin.create("crash", 4)
    proc = spawn_worker("append", root, "crash", "steady", "0", "1000", "100")
    committed_batches = 0
    deadline = time.time() + 300
    while committed_batches < 2 and time.time() < deadline:
        line = proc.stdout.readline()
        if line:
            committed_batches += 1
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = admin.log("crash").table().count()
    assert 200 <= before < 1000, "the kill happened mid-run"
    lines = list(send_batches(spark, root, "crash", "steady", 0, 1000, 100))  # re-run here, with the same id
    assert sum(x["duplicates"] for x in lines) == before
    rows = _log_rows(spark, admin, "crash")
    assert sorted(r["sequence"] for r in rows) == list(range(1000))
    for p in range(4):
        offs = sorted(r["offset"] for r in rows if r["partition"] == p)
        assert offs == list(range(len(offs)))


@pytest.mark.slow
def test_processes_appending_to_different_partitions_never_conflict(spark, root):
    admin = TopicAdmin(spark, root)
    admin.create("apart", 2)
    # one key per process, chosen to land in partition 0 and partition 1
    prefixes = {}
    for i in range(100):
        prefixes.setdefault(partition_for(f"x{i}-0".encode(), 2), f"x{i}-")
    procs = [spawn_worker("append", root, "apart", f"d{p}", "0", "60", "20", "1", prefixes[p]) for p in (0, 1)]
    for proc in procs:
        out, err = proc.communicate(timeout=400)
        assert proc.returncode == 0, err[-3000:]
        lines = [json.loads(line) for line in out.splitlines()]
        assert sum(x["appended"] for x in lines) == 60
        assert sum(x["retries"] for x in lines) == 0, "appends to other partitions must not conflict"
    rows = _log_rows(spark, admin, "apart")
    for p in (0, 1):
        assert sorted(r["offset"] for r in rows if r["partition"] == p) == list(range(60))


def _controller_process(root: str, topic: str, count: int, env: dict[str, str]) -> subprocess.Popen:
    """``controller alter`` in a process of its own (attached to this run's JVM, as the campaign's actors are)."""
    return subprocess.Popen([sys.executable, str(WORKERS / "controller_workers.py"), "alter", root, topic, str(count)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=PROJECT,
                            env={**os.environ, **env})


def _ends(spark, admin, topic: str) -> tuple[dict[int, int], dict[int, int]]:
    """The marked partitions' fixed ends (log metadata) and every partition's end by its rows."""
    log = admin.log(topic)
    fixed = {p: pm.end_offset for p, pm in log.metadata().partitions.items() if pm.end_offset is not None}
    rows = log.table().groupBy("partition").count().collect()
    return fixed, {r["partition"]: r["count"] for r in rows}


def test_an_append_landing_inside_the_shrinks_commit_moves_the_marked_end(spark, root, tmp_path):
    """The shrink fixes a marked partition's final end in the commit that marks it. An append to it
    that lands after the controller read the end and before its commit must make the commit retry:
    a fixed end below the real one lets a group's gate open while records of the marked partition
    are still undelivered, which delivers a key's older records after its newer ones."""
    admin = TopicAdmin(spark, root)
    admin.create("mark", 2)
    list(send_batches(spark, root, "mark", "before", 0, 40, 40))
    point = "alter:before_apply_commit@1"
    ctl = _controller_process(root, "mark", 1, pausing_at(tmp_path, point))
    assert while_paused(ctl, tmp_path, point), ctl.stderr.read()[-3000:]
    landed = list(send_batches(spark, root, "mark", "racer", 0, 40, 40))  # the log still says 2 partitions
    assert landed[0]["appended"] == 40
    resume(tmp_path, point)
    out, err = ctl.communicate(timeout=300)
    assert ctl.returncode == 0, err[-3000:]
    fixed, counted = _ends(spark, admin, "mark")
    assert fixed == {1: counted[1]}, f"partition 1's fixed end {fixed} must be its real end {counted}"
    after = list(send_batches(spark, root, "mark", "after", 0, 20, 20))
    assert after[0]["appended"] == 20 and _ends(spark, admin, "mark")[1][1] == counted[1], "nothing lands in 1"


def test_an_append_written_before_the_shrink_and_committed_after_it_is_rejected(spark, root, tmp_path):
    """A producer whose batch (under 2 partitions) is written when the shrink commits must not land
    in the marked partition: its commit fails, it refreshes and re-partitions under 1."""
    admin = TopicAdmin(spark, root)
    admin.create("late", 2)
    point = "produce:after_write@2"
    producer = spawn_worker("append", root, "late", "px", "0", "80", "40", "10", env=pausing_at(tmp_path, point))
    assert while_paused(producer, tmp_path, point), producer.stderr.read()[-3000:]
    TopicController(spark, root, ControllerSettings(delete_partition_enable=True)).alter("late", 1)
    resume(tmp_path, point)
    out, err = producer.communicate(timeout=400)
    assert producer.returncode == 0, err[-3000:]
    assert [json.loads(x)["refreshes"] for x in out.splitlines()] == [0, 1]
    fixed, counted = _ends(spark, admin, "late")
    assert fixed == {1: counted[1]} and sum(counted.values()) == 80, (fixed, counted)



@pytest.mark.slow  # 40 s; compaction against other writers' commits stays in tests/control_plane/test_retention.py
def test_compaction_racing_producers_and_a_group_loses_moves_reorders_and_duplicates_nothing(spark, root, tmp_path):
    """Two producer processes append small batches while a third process compacts the topic over
    and over and this one consumes it as a group: every append lands (retried at most), and the
    log (read with delta-rs) and the group's sink hold each record once, at its offset, in its
    key's partition, with no record added to the change feed by a compaction."""
    from deltalake import DeltaTable

    from pipelines.consumer import Consumer
    from pipelines.settings import ConsumerSettings
    from tests.support import log_rows

    admin = TopicAdmin(spark, root)
    admin.create("squash", 2)
    stop = tmp_path / "stop"
    compactor = spawn_worker("compact", root, "squash", str(stop), "65536")
    # the producers attach to this run's JVM (they race each other and the compactor's own JVM)
    producers = [spawn_worker("append", root, "squash", f"r{i}", "0", "120", "8", "13", f"r{i}-",
                              env={ATTACH_ENV: "1"}) for i in range(2)]
    consumer = Consumer(spark, root, "squash", "racer", ConsumerSettings(max_records_per_batch=40))
    sink = f"{root}/sink"
    while any(p.poll() is None for p in producers):
        consumer.run_to_sink(sink, max_records=40)
    for i, proc in enumerate(producers):
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        assert sum(json.loads(line)["appended"] for line in out.splitlines()) == 120, f"every batch of r{i} landed"
    stop.touch()
    out, err = compactor.communicate(timeout=600)
    assert compactor.returncode == 0, err[-3000:]
    merges = [json.loads(line) for line in out.splitlines()]
    assert sum(m["files_before"] - m["files_after"] for m in merges) >= 10, f"compaction ran alongside: {merges}"
    consumer.run_to_sink(sink)

    rows = log_rows(root, "squash")
    assert len(rows) == 240
    for p in (0, 1):
        mine = sorted(r["offset"] for r in rows if r["partition"] == p)
        assert mine == list(range(len(mine))), "offsets dense and unique after compaction"
    assert all(partition_for(r["key"], 2) == r["partition"] for r in rows), "no record moved across partitions"
    for pid in ("r0", "r1"):
        seqs = [r["sequence"] for r in sorted(rows, key=lambda r: (r["partition"], r["offset"])) if r["producer_id"] == pid]
        assert sorted(seqs) == list(range(120))
        for p in (0, 1):
            in_p = [r["sequence"] for r in sorted(rows, key=lambda r: r["offset"]) if r["producer_id"] == pid and r["partition"] == p]
            assert in_p == sorted(in_p), "a producer's records keep their order in offset"
    by_offset = {(r["partition"], r["offset"]): (r["key"], r["value"]) for r in rows}
    sunk = DeltaTable(sink).to_pyarrow_table(columns=["partition", "offset", "key", "value"]).to_pylist()
    assert len(sunk) == 240 and {(r["partition"], r["offset"]): (r["key"], r["value"]) for r in sunk} == by_offset, \
        "the group delivered every record once, as the log holds it"
    location = admin.get("squash").location
    feed = DeltaTable(location).load_cdf(starting_version=0).read_all()
    import pyarrow as pa

    assert pa.table(feed).num_rows == 240, "compaction added nothing to the change feed"


@pytest.mark.long
def test_a_producer_racing_a_layout_change_lands_its_batch_once_in_the_new_layout(spark, root, tmp_path):
    """The producer's third batch is written as partitioned files, not committed, when another
    process moves the log to the arrival layout: its commit conflicts with the move and is made
    again in the new layout, so no file of the old layout lands after it and nothing twice."""
    from log_store.engine import DeltaTransaction
    from log_store.log_files import RANGES_TAG

    admin = TopicAdmin(spark, root)
    admin.create("move", 3, layout="partitioned")
    point = "produce:after_write@3"
    producer = spawn_worker("append", root, "move", "pm", "0", "100", "20", env=pausing_at(tmp_path, point))
    assert while_paused(producer, tmp_path, point), producer.stderr.read()[-3000:]
    moved = TopicController(spark, root).change_layout("move", "arrival")
    assert moved.records == 40 and moved.version is not None
    resume(tmp_path, point)
    out, err = producer.communicate(timeout=400)
    assert producer.returncode == 0, err[-3000:]
    rows = _log_rows(spark, admin, "move")
    assert sorted(r["sequence"] for r in rows) == list(range(100)), "every record once"
    for p in range(3):
        offsets = sorted(r["offset"] for r in rows if r["partition"] == p)
        assert offsets == list(range(len(offsets)))
    files = DeltaTransaction.start(spark, admin.get("move").location).files()
    assert all(RANGES_TAG in (f.get("tags") or {}) and not f.get("partitionValues") for f in files), \
        "every file committed after the move is an arrival file"
