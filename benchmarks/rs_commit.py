"""Fenced commit through delta-rs benchmark: lakelog's fenced append of 100 records through
``log_store.rs_engine`` against delta-rs's plain append (``write_deltalake``) of the same rows, in
one run, on the local disk; no JVM.

Two tables shaped as a topic's log (its record schema, partitioned by ``partition``, the change
feed on, statistics of the log's columns, a checkpoint every 100 commits). Each of REPEATS
rounds times, in turn:

- ``delta-rs append``: ``write_deltalake(path, ..., mode="append")`` of the round's 100 records
  (4 partitions), the yardstick: the table opened for each write, as a user writes;
- ``delta-rs append, open table``: the same to a ``DeltaTable`` kept open across rounds, as
  rs_engine keeps its tables (``log_store.rs_tables``), the second yardstick;
- ``rs_engine, blind``: the same rows through ``RsTransaction``: files by pyarrow with Delta's
  statistics, one commit, no application version read or set;
- ``rs_engine, fenced``: what lakelog's append does: read the four partitions' log ends and the
  producer's mark inside the transaction, write, commit the new ends and mark with them.

p50 and p99 in ms, and each case's ratios to both yardsticks. Run: .venv/bin/python
benchmarks/rs_commit.py [REPEATS] (default 200); --json prints the figures as JSON.
"""

from __future__ import annotations

import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa  # noqa: E402
from deltalake import DeltaTable, write_deltalake  # noqa: E402

from log_store.arrow_files import arrow_schema  # noqa: E402
from log_store.names import log_end_app_id, producer_app_id  # noqa: E402
from log_store.rs_create import create_table  # noqa: E402
from log_store.rs_engine import RsTransaction  # noqa: E402
from log_store.topic_log import CHECKPOINT_INTERVAL, RECORD_SCHEMA, STATS_COLUMNS  # noqa: E402

PARTITIONS = 4
PLAIN, OPEN = "delta-rs append", "delta-rs append, open table"
RECORDS = 100
PROPERTIES = {"delta.enableChangeDataFeed": "true", "delta.dataSkippingStatsColumns": STATS_COLUMNS,
              "delta.checkpointInterval": CHECKPOINT_INTERVAL}


def batch(schema: pa.Schema, round_: int) -> pa.Table:
    """The round's records: keyed, spread over the partitions, numbered by the producer."""
    first = round_ * RECORDS
    rows = {
        "partition": [i % PARTITIONS for i in range(RECORDS)], "offset": list(range(first, first + RECORDS)),
        "leader_epoch": [0] * RECORDS, "key": [f"k{i % 10}".encode() for i in range(RECORDS)],
        "value": [f"value {first + i}".encode() for i in range(RECORDS)],
        "timestamp": [datetime.now(timezone.utc)] * RECORDS, "producer_id": ["bench"] * RECORDS,
        "sequence": list(range(first, first + RECORDS)),
    }
    return pa.table({name: rows.get(name, [None] * RECORDS) for name in schema.names}, schema=schema)


def fenced(path: str, rows: pa.Table, round_: int) -> None:
    txn = RsTransaction.start(path)
    ends = {p: txn.app_version(log_end_app_id(p)) for p in range(PARTITIONS)}
    txn.app_version(producer_app_id("bench"))
    txn.write_rows(rows)
    counts = rows.group_by("partition").aggregate([("offset", "count")]).to_pylist()
    txn.commit({**{log_end_app_id(c["partition"]): max(ends[c["partition"]], 0) + c["offset_count"] for c in counts},
                producer_app_id("bench"): (round_ + 1) * RECORDS - 1})


def blind(path: str, rows: pa.Table) -> None:
    txn = RsTransaction.start(path)
    txn.write_rows(rows)
    txn.commit()


def percentiles(times: list[float]) -> dict[str, float]:
    times = sorted(times)
    return {"p50_ms": round(statistics.median(times) * 1000, 2),
            "p99_ms": round(times[min(len(times) - 1, int(len(times) * 0.99))] * 1000, 2)}


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    repeats = int(args[0]) if args else 200
    schema, _required = arrow_schema(RECORD_SCHEMA.json())
    work = Path(tempfile.mkdtemp(prefix="lakelog-bench-rs-commit-"))
    started = datetime.now(timezone.utc)
    try:
        paths = {name: str(work / name) for name in ("plain", "open", "blind", "fenced")}
        for path in paths.values():
            create_table(path, schema, "partition", PROPERTIES)
        kept_open = DeltaTable(paths["open"])
        cases = {
            PLAIN: lambda rows, r: write_deltalake(paths["plain"], rows, mode="append", partition_by=["partition"]),
            OPEN: lambda rows, r: write_deltalake(kept_open, rows, mode="append", partition_by=["partition"]),
            "rs_engine, blind": lambda rows, r: blind(paths["blind"], rows),
            "rs_engine, fenced": lambda rows, r: fenced(paths["fenced"], rows, r),
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for r in range(repeats + 5):  # the first five warm up
            rows = batch(schema, r)
            for name, fn in cases.items():  # in turn, so that the machine's load falls on each alike
                begun = time.perf_counter()
                fn(rows, r)
                if r >= 5:
                    times[name].append(time.perf_counter() - begun)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    figures = {name: percentiles(t) for name, t in times.items()}
    ratios = {name: {f"{q} / {base}": round(f[f"{q}_ms"] / figures[base][f"{q}_ms"], 2)
                     for base in (PLAIN, OPEN) for q in ("p50", "p99")} for name, f in figures.items()}
    result = {"date": started.isoformat(timespec="seconds"), "machine": platform.platform(), "repeats": repeats,
              "records": RECORDS, "figures": figures, "ratios": ratios}
    if "--json" in sys.argv:
        print(json.dumps(result, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"a {RECORDS}-record commit, {repeats} each, {started:%Y-%m-%d %H:%M} UTC")
    for column in ("case", "p50 / p99 ms", f"p50 / p99 ÷ {PLAIN}", f"p50 / p99 ÷ {OPEN}"):
        table.add_column(column)
    for name, f in figures.items():
        r = ratios[name]
        table.add_row(name, f"{f['p50_ms']} / {f['p99_ms']}", f"{r[f'p50 / {PLAIN}']:.2f} / {r[f'p99 / {PLAIN}']:.2f}",
                      f"{r[f'p50 / {OPEN}']:.2f} / {r[f'p99 / {OPEN}']:.2f}")
    Console().print(table)


if __name__ == "__main__":
    main()
