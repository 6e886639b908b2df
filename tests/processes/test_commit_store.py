"""Invariant 14: a Delta commit is put-if-absent across processes. Several OS processes, each with
its own JVM, race blind appends to one table; every commit Delta reported as successful must be
in the table exactly once, at a version no other commit got.

The negative control runs the same race through a test-only store with the shape of Delta's own
across JVMs (check that the commit file is absent, then write without checking again) and a
pause inside that window: it loses acknowledged commits, so the race can see the defect. The
same pause inside lakelog's store, between writing a commit's bytes and publishing them, loses
none. The table is read back with delta-rs, not with lakelog or Delta's JVM reader.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from tests.support import PROJECT, WORKERS, race_together

CONTROL = "lakelog.storage.testing.CheckThenWriteLogStore"
LAKELOG = "default"  # what build_session sets: lakelog.storage.PutIfAbsentLogStore
SCHEMA = pa.schema([("writer", pa.string()), ("i", pa.int32())])


def race(table: str, store: str, go: Path, workers: int = 3, commits: int = 6, pause_ms: int = 150,
         s3: str = "", storage: dict | None = None, create: bool = True) -> tuple[list[dict], list[dict], list[dict]]:
    """Run the race (on a new table, unless not ``create``); return what the workers were told
    (acknowledged commits), the commits Delta refused with an error, and the table's rows."""
    if create:
        write_deltalake(table, pa.table({"writer": [], "i": []}, SCHEMA), storage_options=storage)
    told = race_together("commit_workers.py", [[table, f"w{n}", str(commits), str(go), store, str(pause_ms), s3]
                                               for n in range(workers)], go)
    rows = DeltaTable(table, storage_options=storage).to_pyarrow_table().to_pylist()
    return [t for t in told if "version" in t], [t for t in told if "error" in t], rows


def lost_and_doubled(acked: list[dict], rows: list[dict]) -> tuple[set, set]:
    present = Counter((r["writer"], r["i"]) for r in rows)
    lost = {(a["writer"], a["i"]) for a in acked if present[(a["writer"], a["i"])] == 0}
    return lost, {k for k, n in present.items() if n > 1}


@pytest.mark.long
def test_racing_processes_lose_commits_through_a_check_then_write_store_and_none_through_lakelogs(tmp_path):
    # A store that replaces commit files may also leave a log Delta's own checks then refuse (an
    # error, not an acknowledgement): allowed in the negative control, never in lakelog's store.
    acked, _, rows = race(str(tmp_path / "control"), CONTROL, tmp_path / "go-control")
    lost, _ = lost_and_doubled(acked, rows)
    assert lost, "the negative control: Delta's shape across JVMs loses acknowledged commits here"
    assert len({a["version"] for a in acked}) < len(acked), "two writers were told they committed one version"

    acked, errors, rows = race(str(tmp_path / "lakelog"), LAKELOG, tmp_path / "go-lakelog")
    lost, doubled = lost_and_doubled(acked, rows)
    assert not errors, errors
    assert len(acked) == 18 and not lost and not doubled, f"lost {sorted(lost)}, doubled {sorted(doubled)}"
    assert sorted(a["version"] for a in acked) == list(range(1, 19)), "each commit its own version, none skipped"


@pytest.mark.s3
def test_on_s3_racing_processes_lose_commits_through_a_check_then_put_store_and_none_through_lakelogs(
        s3, tmp_path):
    storage = s3.environment()
    bucket = s3.create_bucket("commit-race")
    acked, _, rows = race(f"s3a://{bucket}/control", CONTROL, tmp_path / "go-control", s3=s3.endpoint,
                          storage=storage)
    lost, _ = lost_and_doubled(acked, rows)
    assert lost, "the negative control: a check, then a plain PUT, loses acknowledged commits"

    acked, errors, rows = race(f"s3a://{bucket}/lakelog", LAKELOG, tmp_path / "go-lakelog", s3=s3.endpoint,
                               storage=storage)
    lost, doubled = lost_and_doubled(acked, rows)
    assert not errors, errors
    assert len(acked) == 18 and not lost and not doubled, f"lost {sorted(lost)}, doubled {sorted(doubled)}"
    assert sorted(a["version"] for a in acked) == list(range(1, 19))


@pytest.mark.s3
def test_a_store_that_ignores_conditional_writes_is_refused_before_any_commit(tmp_path):
    """An S3-compatible store that ignores If-None-Match would let a racing writer replace a
    commit: the first commit to it probes (a scratch key created conditionally twice) and is
    refused, naming the setting, with nothing committed; the probe leaves no object behind."""
    from tests.s3_emulator import S3Emulator

    with S3Emulator(conditional_writes=False) as ignorant:
        storage = ignorant.environment()
        bucket = ignorant.create_bucket("ignorant")
        acked, errors, rows = race(f"s3a://{bucket}/t", LAKELOG, tmp_path / "go", workers=1, commits=2,
                                   pause_ms=0, s3=ignorant.endpoint, storage=storage)
        keys = [o["Key"] for o in ignorant.client().list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert not acked and not rows and len(errors) == 2
    assert all("ignores conditional writes" in e["error"] and "spark.delta.logStore.s3a.impl" in e["error"]
               for e in errors), errors
    assert not [k for k in keys if "lakelog-probe" in k], keys


@pytest.mark.long  # 30 s; the commit store's other races stay in the default suite
def test_a_commit_killed_between_writing_and_publishing_leaves_no_file_behind_for_long(tmp_path):
    """A writer killed after writing its commit's bytes, before publishing them, leaves its
    temporary file: outside the folder Delta lists, and removed by the next commit of a version
    at or past it (its writer lost the race or is gone)."""
    import signal
    import time

    table = str(tmp_path / "t")
    write_deltalake(table, pa.table({"writer": [], "i": []}, SCHEMA))
    go = tmp_path / "go"
    killed = subprocess.Popen([sys.executable, str(WORKERS / "commit_workers.py"), table, "killed", "1", str(go),
                               LAKELOG, "600000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=PROJECT)
    try:
        assert "ready" in json.loads(killed.stdout.readline())
        go.touch()
        temps = Path(table, "_delta_log", ".lakelog-tmp")
        deadline = time.monotonic() + 120
        while not (temps.is_dir() and any(temps.iterdir())):
            assert time.monotonic() < deadline and killed.poll() is None, killed.stderr.read()[-3000:]
            time.sleep(0.1)
        killed.send_signal(signal.SIGKILL)  # inside the store's pause: bytes written, not published
        killed.wait(60)
    finally:
        if killed.poll() is None:
            killed.kill()
    left = [p.name for p in temps.iterdir()]
    assert left and all(name.startswith(f"{1:020d}.json.") for name in left), left
    assert not [p.name for p in Path(table, "_delta_log").iterdir() if p.name.endswith(".tmp")]
    acked, errors, rows = race(table, LAKELOG, tmp_path / "go-next", workers=1, commits=1, pause_ms=0, create=False)
    assert acked == [{"writer": "w0", "i": 0, "version": 1}] and not errors
    assert not any(temps.iterdir()), "the next commit removed the dead writer's file"
