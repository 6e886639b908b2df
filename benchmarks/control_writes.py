"""Control-plane writes benchmark: a group's offsets commit and a plain control-table append
against raw Delta appends of the same rows, in one run.

A few rows made in Python reach raw Delta in one of two ways: PySpark's ``createDataFrame`` on
a list (pickled rows converted in Spark's Python workers) or an Arrow table sent to the JVM
(``log_store.frames.rows_frame``). lakelog writes them as a Parquet file made by pyarrow and
commits it through Delta, without a Spark job (``DeltaTransaction.write_rows``, 2026-11-26).
Timed here, each as the median of REPEATS:

- ``raw Delta append, list rows``: ``spark.createDataFrame(rows, schema).write...append``
- ``raw Delta append, Arrow rows``: the same rows through ``rows_frame``
- ``ControlTables.append``: lakelog's labelled append to a control table (same rows)
- ``GroupOffsets.commit``: a group member's offsets commit of the same 4 positions under
  generation 1 (reads the group's fence property in the transaction, writes, commits)

Ratios are against the raw Arrow append. Run: make bench-control (or .venv/bin/python
benchmarks/control_writes.py [REPEATS])
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

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from control_plane.group.offsets import GroupOffsets  # noqa: E402
from control_plane.layout import RootLayout  # noqa: E402
from control_plane.records import OFFSET_SCHEMA, OffsetCommit  # noqa: E402
from control_plane.tables import ControlTables  # noqa: E402
from log_store.config import SparkSettings  # noqa: E402
from log_store.frames import rows_frame  # noqa: E402
from log_store.session import build_session  # noqa: E402


def median_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    spark = build_session(SparkSettings())
    work = Path(tempfile.mkdtemp(prefix="lakelog-bench-control-"))
    try:
        root = str(work / "root")
        tables = ControlTables(spark, RootLayout(root))
        offsets = GroupOffsets(spark, root)
        rows = [OffsetCommit(group="g", topic="t", partition=p, offset=10 * p).model_dump() for p in range(4)]
        positions = {p: 10 * p for p in range(4)}

        def raw_list():
            spark.createDataFrame(rows, OFFSET_SCHEMA).write.format("delta").mode("append").save(str(work / "raw-list"))

        def raw_arrow():
            rows_frame(spark, rows, OFFSET_SCHEMA).write.format("delta").mode("append").save(str(work / "raw-arrow"))

        cases = {
            "raw Delta append, list rows (PySpark's createDataFrame)": raw_list,
            "raw Delta append, Arrow rows (rows_frame)": raw_arrow,
            "ControlTables.append (offset_commits)": lambda: tables.append("offset_commits", rows),
            "GroupOffsets.commit (fenced, generation 1)": lambda: offsets.commit("g", "t", positions, 1, "m"),
        }
        offsets.raise_fence("g", 1, "m")
        for fn in cases.values():  # JIT, Delta code paths and the tables' creation before timing
            fn()
            fn()
        figures = {name: median_of(fn, repeats) for name, fn in cases.items()}
    finally:
        shutil.rmtree(work, ignore_errors=True)

    base = figures["raw Delta append, Arrow rows (rows_frame)"]
    table = Table(title=f"control-plane writes of 4 rows (median of {repeats}, seconds; ratio to the raw Arrow append)")
    for col in ("case", "seconds", "ratio"):
        table.add_column(col)
    for name, t in figures.items():
        table.add_row(name, f"{t:.3f}", f"{t / base:.2f}")
    Console(width=140).print(table)
    out = Path(__file__).resolve().parent / "out" / "control_writes.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({
        "when": datetime.now(timezone.utc).isoformat(), "host": platform.node(), "python": platform.python_version(),
        "repeats": repeats, "seconds": figures,
    }, indent=2))
    Console(stderr=True).print(f"wrote {out}")


if __name__ == "__main__":
    main()
