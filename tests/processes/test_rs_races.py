"""Invariants 3, 4 and 14 through delta-rs (log_store.rs_engine), no JVM: four OS processes race
fenced appends to one local table, two fenced on one partition's log end and two on another's.
Read back from every commit file: no acknowledged commit lost or made twice, versions dense, each
application id's versions strictly rising, offsets dense under each fence; commits on the other
fence were passed over, never rejected, and those on the same fence were."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from log_store.names import log_end_app_id
from log_store.rs_engine import create_table
from tests.support import PROJECT, WORKERS

SCHEMA = pa.schema([("writer", pa.string()), ("i", pa.int32()), ("offset", pa.int64())])
COMMITS = 50
FENCES = {"w0": log_end_app_id(0), "w1": log_end_app_id(0), "w2": log_end_app_id(1), "w3": log_end_app_id(1)}


def race(table: str, go: Path) -> list[dict]:
    """Run the four workers together; what each was told, one entry per acknowledged commit."""
    procs = [subprocess.Popen([sys.executable, str(WORKERS / "rs_commit_workers.py"), table, writer, fence,
                               str(COMMITS), str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=PROJECT)
             for writer, fence in FENCES.items()]
    for proc in procs:
        line = proc.stdout.readline()
        assert line and "ready" in json.loads(line), proc.stderr.read()[-3000:]
    go.touch()
    told = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        told += [json.loads(line) for line in out.splitlines()]
    return told


def commits(table: str) -> dict[int, list[dict]]:
    """Every commit file of the table, by version, as its actions."""
    log = Path(table, "_delta_log")
    return {int(p.name[:20]): [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
            for p in log.glob("*.json")}


@pytest.mark.long
def test_racing_processes_lose_nothing_double_nothing_and_keep_every_fence(tmp_path):
    table = str(tmp_path / "log")
    first = create_table(table, SCHEMA)
    acked = race(table, tmp_path / "go")
    assert len(acked) == COMMITS * len(FENCES)

    found = commits(table)
    assert sorted(found) == list(range(max(found) + 1)), "versions dense"
    assert len(found) == first + 1 + len(acked), "one commit per acknowledged append, none more"
    rows_at: dict[int, list[dict]] = {}
    last: dict[str, int] = {}
    for version in sorted(found):
        for action in found[version]:
            if "add" in action:
                rows_at.setdefault(version, []).extend(pq.read_table(Path(table, action["add"]["path"])).to_pylist())
            if "txn" in action:
                app_id, v = action["txn"]["appId"], action["txn"]["version"]
                assert v > last.get(app_id, -1), f"{app_id} fell or stayed at {v} in commit {version}"
                last[app_id] = v
    landed = Counter((r["writer"], r["i"], version) for version, rows in rows_at.items() for r in rows)
    assert all(n == 1 for n in landed.values()), "no row twice"
    assert set(landed) == {(a["writer"], a["i"], a["version"]) for a in acked}, "each acknowledged row where it was told"

    for fence in set(FENCES.values()):
        mine = [a for a in acked if FENCES[a["writer"]] == fence]
        assert sorted(a["offset"] for a in mine) == list(range(len(mine))), f"offsets under {fence} dense"
        assert last[fence] == len(mine) - 1
    assert sum(a["retries"] for a in acked) > 0, "appends on one fence conflicted and were retried"
    assert any(a["version"] > a["read"] + 1 for a in acked), "appends on the other fence were committed past"
