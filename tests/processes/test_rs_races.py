"""Invariants 3, 4 and 14 through delta-rs (log_store.rs_engine), no JVM: four OS processes race
fenced appends to one table, two fenced on one partition's log end and two on another's, on a
local disk and on S3. Read back from every commit file: no acknowledged commit lost or made
twice, versions dense, each application id's versions strictly rising, offsets dense under each
fence; commits on the other fence were passed over, never rejected, and those on the same fence
were. The negative control: an S3-compatible store that ignores ``If-None-Match`` loses
acknowledged commits through the same race (delta-rs does not probe for it; lakelog must)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from log_store import delta_log
from log_store.names import log_end_app_id
from log_store.object_store import arrow_filesystem
from log_store.rs_create import create_table
from tests.support import race_together

SCHEMA = pa.schema([("writer", pa.string()), ("i", pa.int32()), ("offset", pa.int64())])
FENCES = {"w0": log_end_app_id(0), "w1": log_end_app_id(0), "w2": log_end_app_id(1), "w3": log_end_app_id(1)}


def race(table: str, go: Path, commits: int, storage: dict | None = None) -> list[dict]:
    """Make the table, run the four workers together; one entry per acknowledged commit."""
    create_table(table, SCHEMA, storage=storage)
    told = race_together("rs_commit_workers.py", [[table, writer, fence, str(commits), str(go),
                                                    json.dumps(storage or {})] for writer, fence in FENCES.items()], go)
    assert len(told) == commits * len(FENCES)
    return told


def read_back(table: str, storage: dict | None = None) -> tuple[list[int], dict[int, list[dict]], dict[int, dict]]:
    """Every commit file's version; each version's rows, read from the files its adds name; and
    each version's set transactions."""
    fs, root = arrow_filesystem(table, storage)
    log = f"{root}/_delta_log"
    versions = sorted(int(i.base_name[:20]) for i in fs.get_file_info(pafs.FileSelector(log)) if i.base_name.endswith(".json"))
    rows, txns = {}, {}
    for v in versions:
        actions = delta_log.commit_actions(fs, log, v)
        rows[v] = [r for a in actions if "add" in a
                   for r in pq.read_table(f"{root}/{a['add']['path']}", filesystem=fs).to_pylist()]
        txns[v] = {a["txn"]["appId"]: a["txn"]["version"] for a in actions if "txn" in a}
    return versions, rows, txns


def lost_and_doubled(acked: list[dict], rows: dict[int, list[dict]]) -> tuple[set, set]:
    landed = Counter((r["writer"], r["i"], v) for v, rs in rows.items() for r in rs)
    told = {(a["writer"], a["i"], a["version"]) for a in acked}
    return told - set(landed), {k for k, n in landed.items() if n > 1 or k not in told}


def check(acked: list[dict], table: str, storage: dict | None = None) -> None:
    versions, rows, txns = read_back(table, storage)
    assert versions == list(range(len(versions))), "versions dense"
    lost, doubled = lost_and_doubled(acked, rows)
    assert not lost and not doubled, f"lost {sorted(lost)[:5]}, doubled or unacknowledged {sorted(doubled)[:5]}"
    assert sum(1 for v in versions if rows[v]) == len(acked), "one commit per acknowledged append"
    last: dict[str, int] = {}
    for v in versions:
        for app_id, n in txns[v].items():
            assert n > last.get(app_id, -1), f"{app_id} fell or stayed at {n} in commit {v}"
            last[app_id] = n
    for fence in set(FENCES.values()):
        mine = [a for a in acked if FENCES[a["writer"]] == fence]
        assert sorted(a["offset"] for a in mine) == list(range(len(mine))), f"offsets under {fence} dense"
        assert last[fence] == len(mine) - 1
    assert sum(a["retries"] for a in acked) > 0, "appends on one fence conflicted and were retried"
    assert any(a["version"] > a["read"] + 1 for a in acked), "appends on the other fence were committed past"


@pytest.mark.long
def test_racing_processes_on_a_local_disk_lose_nothing_double_nothing_and_keep_every_fence(tmp_path):
    table = str(tmp_path / "log")
    check(race(table, tmp_path / "go", commits=50), table)


@pytest.mark.s3
def test_racing_processes_on_s3_lose_nothing_and_through_a_store_ignoring_conditional_puts_lose_commits(
        s3, tmp_path):
    from tests.s3_emulator import S3Emulator

    storage = s3.environment()
    table = f"s3://{s3.create_bucket('rs-race')}/log"
    check(race(table, tmp_path / "go", commits=10, storage=storage), table, storage)

    with S3Emulator(conditional_writes=False) as ignorant:
        storage = ignorant.environment()
        table = f"s3://{ignorant.create_bucket('rs-race-ignorant')}/log"
        acked = race(table, tmp_path / "go-ignorant", commits=10, storage=storage)
        lost, _ = lost_and_doubled(acked, read_back(table, storage)[1])
    assert lost, "the negative control: a store that replaces commit files loses acknowledged commits"


@pytest.mark.s3
def test_commits_to_a_store_that_ignores_conditional_writes_are_refused_and_the_probe_leaves_nothing(s3):
    """lakelog's commits to S3 go through delta-rs, configured from the session's S3A settings
    (here a session not started: no JVM). The first to a store probes it; a store that takes a
    second create of one commit file is refused, with nothing committed; one that refuses it is
    used; the probe's scratch table is removed either way."""
    from log_store import commits
    from log_store.errors import StorageError
    from log_store.session import LazySession
    from tests.s3_emulator import S3Emulator

    def unbuilt(emulator):
        return LazySession(lambda: pytest.fail("a JVM was started"), emulator.spark_conf())

    def keys(emulator, bucket):
        return [o["Key"] for o in emulator.client().list_objects_v2(Bucket=bucket).get("Contents", [])]

    with S3Emulator(conditional_writes=False) as ignorant:
        bucket = ignorant.create_bucket("ignorant-commits")
        with pytest.raises(StorageError, match="does not honour conditional writes"):
            commits.start(unbuilt(ignorant), f"s3a://{bucket}/root/topics/t")
        assert keys(ignorant, bucket) == [], "the probe's scratch object is removed, nothing else written"

    bucket = s3.create_bucket("honouring-commits")
    table = f"s3a://{bucket}/root/t"
    create_table(table, pa.schema([("x", pa.int64())]), storage=s3.environment())
    txn = commits.start(unbuilt(s3), table)
    txn.write_rows(pa.table({"x": [1, 2]}))
    assert txn.commit({"writer": 0}) == 1
    assert not [k for k in keys(s3, bucket) if "_lakelog_probe" in k]
