"""A small read of a local log's offset ranges with delta-rs (``rs_reader.log_ranges``: compaction in
the driver, a replication copy, a consumer's Arrow batch): the rows of the ranges, typed as the
table is, and a process that read them exits cleanly. No Spark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from log_store import rs_reader
from log_store.rs_create import create_table
from log_store.rs_engine import RsTransaction

PROJECT = Path(__file__).resolve().parents[2]
SCHEMA = pa.schema([("partition", pa.int32(), False), ("offset", pa.int64(), False), ("key", pa.binary()),
                    ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
                    ("producer_id", pa.string())])


@pytest.fixture()
def log(tmp_path) -> str:
    path = str(tmp_path / "log")
    create_table(path, SCHEMA, "partition", {})
    for first in (0, 5):  # two commits: two files a partition
        txn = RsTransaction.start(path)
        txn.write_rows(pa.table({
            "partition": pa.array([p for p in (0, 1) for _ in range(5)], pa.int32()),
            "offset": [o for _ in (0, 1) for o in range(first, first + 5)],
            "key": [f"k{o}".encode() for _ in (0, 1) for o in range(first, first + 5)],
            "headers": [[{"key": "h", "value": b"v"}]] * 10,
            "producer_id": ["p"] * 10,
        }, schema=SCHEMA))
        txn.commit({})
    return path


def test_the_rows_of_the_ranges_come_by_partition_and_offset_typed_as_the_table(log):
    version = rs_reader.version(log)
    rows = rs_reader.log_ranges(log, version, {1: (3, 7), 0: (8, 10)})
    assert [(r["partition"], r["offset"]) for r in rows.to_pylist()] == [(0, 8), (0, 9), (1, 3), (1, 4), (1, 5), (1, 6)]
    assert rows.schema == SCHEMA, "binary and strings as the table has them, not the query engine's views"
    some = rs_reader.log_ranges(log, version, {0: (0, 2)}, ["key", "offset"])
    assert some.schema == pa.schema([SCHEMA.field("key"), SCHEMA.field("offset")])
    assert some.column("key").to_pylist() == [b"k0", b"k1"]
    assert rs_reader.log_ranges(log, version, {}).num_rows == 0, "no ranges, no rows (not the whole log)"


def test_a_process_that_read_ranges_exits_cleanly(log):
    """A pyarrow dataset scan of the same table made about a third of such processes abort at exit
    ("terminate called without an active exception", -6): a controller tick that compacted had its
    work done and still failed. Twelve processes in a row must all exit 0."""
    script = ("import sys; from log_store import rs_reader; "
              f"rows = rs_reader.log_ranges({log!r}, rs_reader.version({log!r}), {{0: (0, 10), 1: (2, 6)}}); "
              "sys.exit(0 if rows.num_rows == 14 else 3)")
    codes = []
    for _ in range(3):
        procs = [subprocess.Popen([sys.executable, "-c", script], cwd=PROJECT, stderr=subprocess.PIPE, text=True)
                 for _ in range(4)]
        codes += [(p.wait(timeout=120), p.stderr.read()[-300:]) for p in procs]
    assert [c for c, _ in codes] == [0] * 12, codes
