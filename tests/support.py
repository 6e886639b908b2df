"""Helpers the tests share: worker processes and generated records."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]
WORKERS = PROJECT / "tests" / "processes"


def run_worker(*args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``tests/processes/workers.py`` in its own OS process (its own JVM and Spark session)."""
    proc = subprocess.run(
        [sys.executable, str(WORKERS / "workers.py"), *args],
        capture_output=True, text=True, timeout=timeout, cwd=PROJECT, env={**os.environ},
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"worker {args} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc


def cli_without_java(root: str, *args: str, timeout: float = 60,
                     env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``lakelog --root ROOT ARGS`` (with ``env`` added) with no usable Java: a command that
    started Spark in its own process would fail, so a success proves it answered without a JVM
    of its own."""
    from chaos.host import GATEWAY_ENV

    env = {k: v for k, v in os.environ.items() if k != GATEWAY_ENV} | {"JAVA_HOME": "/nonexistent"} | (env or {})
    return subprocess.run([sys.executable, "-m", "jobs.cli", "--root", root, *args], cwd=PROJECT,
                          capture_output=True, text=True, timeout=timeout, env=env)


def spawn_worker(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(WORKERS / "workers.py"), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=PROJECT, env={**os.environ, **(env or {})},
    )


def race_together(worker: str, argvs: list[list[str]], go: Path) -> list[dict]:
    """Start one ``worker`` (a script in tests/processes) per argument list, wait until each says it
    is ready (its session made, its table read), touch ``go`` so they start at one instant, and
    return every JSON line they printed."""
    import json

    procs = [subprocess.Popen([sys.executable, str(WORKERS / worker), *argv], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, cwd=PROJECT) for argv in argvs]
    for proc in procs:
        line = proc.stdout.readline()
        assert line and "ready" in json.loads(line), proc.stderr.read()[-3000:]
    go.touch()
    told = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        told += [json.loads(line) for line in out.splitlines()]
    return told


def pausing_at(folder: Path, *points: str) -> dict[str, str]:
    """The environment that makes a worker wait at each ``step@n`` of ``points`` (log_store/crash.py)."""
    return {"LAKELOG_PAUSE_AT": ",".join(points), "LAKELOG_PAUSE_DIR": str(folder)}


def while_paused(proc: subprocess.Popen, folder: Path, point: str, timeout: float = 300) -> bool:
    """Wait until ``proc`` waits at ``point``; False if it ended first. ``resume`` lets it go on."""
    import time

    deadline = time.monotonic() + timeout
    while not (folder / f"{point}.reached").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def resume(folder: Path, point: str) -> None:
    (folder / f"{point}.go").touch()


def make_records(spark, n: int, keys: int = 10, start: int = 0, key_prefix: str = "k"):
    """A DataFrame of n keyed records with sequences start..start+n-1 and value == sequence."""
    from pyspark.sql import functions as F

    return spark.range(start, start + n).select(
        F.concat(F.lit(key_prefix), (F.col("id") % keys).cast("string")).alias("key"),
        F.col("id").cast("string").alias("value"),
        F.col("id").alias("sequence"),
    )


LOG_COLUMNS = ["partition", "offset", "leader_epoch", "key", "value", "headers", "producer_id", "sequence"]


def log_rows(root: str, topic: str, columns: list[str] = LOG_COLUMNS) -> list[dict]:
    """A topic's log as delta-rs reads it (not through lakelog): the location from the control
    table of topics, then every record's ``columns``."""
    from deltalake import DeltaTable

    from control_plane.layout import RootLayout

    topics = DeltaTable(RootLayout(root).control("topics")).to_pyarrow_table().to_pylist()
    location = next(r["location"] for r in topics if r["topic"] == topic)
    return DeltaTable(location).to_pyarrow_table(columns=columns).to_pylist()


def create_as_earlier_release(monkeypatch, admin, topic: str, partitions: int) -> None:
    """Create ``topic`` (with ``admin``, a TopicAdmin) as a release of lakelog before null values
    made topics: its log's value column NOT NULL."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    import log_store.topic_log as topic_log

    old = StructType([StructField("value", BinaryType(), False) if f.name == "value" else f
                      for f in topic_log.RECORD_SCHEMA.fields])
    with monkeypatch.context() as patch:
        patch.setattr(topic_log, "RECORD_SCHEMA", old)
        admin.create(topic, partitions)


# A value column of keys 0-5 (strings): key 3's value null (a tombstone), key 4's empty, the rest "x".
TOMBSTONE_KEY, EMPTY_KEY = "3", "4"
# The same in SQL, over an ``id`` column (a Spark Connect session takes it as a classic one does).
TOMBSTONE_VALUES = f"case id when {TOMBSTONE_KEY} then null when {EMPTY_KEY} then '' else 'x' end as value"


def tombstone_values(column) -> object:
    """A Spark column of ``TOMBSTONE_KEY``'s value null, ``EMPTY_KEY``'s empty, others "x", from an id column."""
    from pyspark.sql import functions as F

    return F.when(column == int(TOMBSTONE_KEY), None).when(column == int(EMPTY_KEY), "").otherwise("x")


def check_tombstones(rows: list[dict]) -> None:
    """``rows`` (key and value, as bytes) hold the tombstone null, the empty value empty, the rest "x"."""
    values = {bytes(r["key"]).decode(): r["value"] for r in rows}
    assert values[TOMBSTONE_KEY] is None, f"the tombstone's value is {values[TOMBSTONE_KEY]!r}, not null"
    assert values[EMPTY_KEY] == b"", f"the empty value is {values[EMPTY_KEY]!r}, not empty"
    assert all(v == b"x" for k, v in values.items() if k not in (TOMBSTONE_KEY, EMPTY_KEY))


def forget_commits_before(path: str, version: int) -> None:
    """Delta's log cleanup by hand: remove a table's commit files (and their checksums) older
    than ``version``, which must have a checkpoint, as Delta does at a checkpoint once they are
    older than ``delta.logRetentionDuration``. The table's history then starts at ``version``."""
    log = Path(path, "_delta_log")
    assert any(log.glob(f"{version:020d}.checkpoint*.parquet")), f"no checkpoint at version {version} of {path}"
    for f in log.iterdir():
        if f.name[:20].isdigit() and int(f.name[:20]) < version and ".checkpoint." not in f.name:
            f.unlink()


@pytest.fixture(autouse=True)
def no_jvm(monkeypatch):
    """Fixture for modules that import it: every path runs without a JVM (delta-rs)."""
    monkeypatch.setenv("LAKELOG_NO_JVM", "1")


@pytest.fixture()
def spark():
    """Fixture for modules that import it: a session that fails the test if a JVM starts."""
    from log_store.session import LazySession

    session = LazySession(lambda: pytest.fail("a JVM was started"))
    yield session
    assert not session.started
