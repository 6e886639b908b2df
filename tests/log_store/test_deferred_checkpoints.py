"""Checkpoints left out of a commit and written by a thread of their own (``log_store.checkpoints``,
as ``lakelog serve``'s pool threads commit): the commit that reaches the interval returns before
its checkpoint exists and without reconstructing the table state (no Spark job), the checkpoints
follow, each of the newest snapshot, and a thread that does not defer keeps Delta's own behaviour
(the checkpoint written inside the commit)."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa

from log_store.checkpoints import DeferredCheckpoints, defer_here
from log_store.engine import DeltaTransaction


def _table(spark, path: Path) -> str:
    spark.sql(f"CREATE TABLE delta.`{path}` (id BIGINT) USING delta TBLPROPERTIES ('delta.checkpointInterval' = '2')")
    return str(path)


def _append(spark, path: str, i: int) -> int:
    txn = DeltaTransaction.start(spark, path)
    txn.write_rows(pa.table({"id": pa.array([i], pa.int64())}))
    return txn.commit({})


def _checkpoints(path: str) -> list[str]:
    return sorted(p.name for p in (Path(path) / "_delta_log").glob("*.checkpoint.parquet"))


class _Held(DeferredCheckpoints):
    """Writes nothing until released: what a commit leaves behind is seen before the thread acts."""

    def __init__(self, spark) -> None:
        self.release = threading.Event()
        super().__init__(spark)

    def _run(self) -> None:
        self.release.wait(120)
        super()._run()


def test_a_deferring_thread_commits_without_writing_the_checkpoint_and_the_thread_writes_it(spark, tmp_path):
    path = _table(spark, tmp_path / "t")
    held = _Held(spark)
    defer_here(held)
    try:
        versions = [_append(spark, path, i) for i in range(4)]
    finally:
        defer_here(None)
    assert versions == [1, 2, 3, 4]
    assert _checkpoints(path) == []  # versions 2 and 4 were due: neither commit wrote one
    held.release.set()
    assert held.wait(120)
    assert _checkpoints(path)[-1] == "00000000000000000004.checkpoint.parquet"  # the newest snapshot's
    # The next interval's: the writer's DeltaLog reads the table again, not the snapshot it wrote last.
    defer_here(held)
    try:
        assert [_append(spark, path, i) for i in range(4, 6)] == [5, 6]
    finally:
        defer_here(None)
    assert held.wait(120)
    assert _checkpoints(path)[-1] == "00000000000000000006.checkpoint.parquet"
    held.stop()
    # The table reads as before, from its checkpoint: every row once.
    assert sorted(r.id for r in spark.read.format("delta").load(path).collect()) == list(range(6))


def test_the_deferring_commit_that_reaches_the_interval_runs_no_spark_job(spark, tmp_path):
    """Delta 4.4 reconstructs the table state inside such a commit (for the statistics it logs) even
    without its checkpoint hook: seconds of Spark jobs under the table's lock."""
    path = _table(spark, tmp_path / "t")
    held = _Held(spark)
    group = f"commit-at-interval-{tmp_path.name}"
    defer_here(held)
    try:
        assert _append(spark, path, 0) == 1
        spark.sparkContext.setJobGroup(group, "the commit of version 2")
        try:
            assert _append(spark, path, 1) == 2
        finally:
            spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    finally:
        defer_here(None)
    assert list(spark.sparkContext.statusTracker().getJobIdsForGroup(group)) == []
    held.release.set()
    assert held.wait(120)
    held.stop()
    assert _checkpoints(path) == ["00000000000000000002.checkpoint.parquet"]


def test_a_thread_that_does_not_defer_writes_the_checkpoint_inside_its_commit(spark, tmp_path):
    path = _table(spark, tmp_path / "t")
    assert [_append(spark, path, i) for i in range(2)] == [1, 2]
    assert _checkpoints(path) == ["00000000000000000002.checkpoint.parquet"]


def test_on_a_local_root_the_commit_reaching_the_interval_writes_the_checkpoint_with_no_spark_job(spark, tmp_path):
    """Not deferring, the checkpoint is there when the commit returns, written by delta-rs without
    the seconds of Spark jobs Delta's own takes; Spark and delta-rs read the table from it alone."""
    from deltalake import DeltaTable

    from log_store.delta_classes import delta

    path = _table(spark, tmp_path / "t")
    assert _append(spark, path, 0) == 1
    group = f"local-commit-at-interval-{tmp_path.name}"
    spark.sparkContext.setJobGroup(group, "the commit of version 2")
    try:
        assert _append(spark, path, 1) == 2
    finally:
        spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
    assert list(spark.sparkContext.statusTracker().getJobIdsForGroup(group)) == []
    assert _checkpoints(path) == ["00000000000000000002.checkpoint.parquet"]
    for f in (Path(path) / "_delta_log").glob("*.json"):
        if int(f.name.split(".")[0]) < 2:
            f.unlink()  # the table's state can only come from the checkpoint now
    delta(spark).DeltaLog.clearCache()
    assert _append(spark, path, 2) == 3
    assert sorted(r.id for r in spark.read.format("delta").load(path).collect()) == [0, 1, 2]
    assert sorted(DeltaTable(path).to_pyarrow_table()["id"].to_pylist()) == [0, 1, 2]


def test_a_table_delta_rs_cannot_checkpoint_still_gets_its_checkpoint_from_spark(spark, tmp_path, monkeypatch):
    """delta-rs refuses tables with writer features it lacks: Spark writes the checkpoint then, and
    the commit that reached the interval still returns with it there."""
    from deltalake import DeltaTable

    def refuse(self):
        raise RuntimeError("Unsupported writer feature")

    monkeypatch.setattr(DeltaTable, "create_checkpoint", refuse)
    path = _table(spark, tmp_path / "t")
    assert [_append(spark, path, i) for i in range(2)] == [1, 2]
    assert _checkpoints(path) == ["00000000000000000002.checkpoint.parquet"]
    assert sorted(r.id for r in spark.read.format("delta").load(path).collect()) == [0, 1]
