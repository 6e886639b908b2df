"""Read commands as a user runs them (a new process each time): ``topics list`` and ``topics
describe`` read with delta-rs (the default on a local root), the same commands through Spark
(``LAKELOG_FAST_READS=0``), and raw Delta: a bare delta-rs read of the same tables, in one run.

    .venv/bin/python benchmarks/read_commands.py [--topics 20] [--repeats 3]

Prints median seconds and ratios; the numbers go to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

RAW = """
import sys
from deltalake import DeltaTable
root, topic = sys.argv[1], sys.argv[2]
DeltaTable(root + "/control/topics").to_pyarrow_table().to_pylist()
log = DeltaTable(root + "/topics/" + topic)
log.metadata().configuration
[log.transaction_version(f"lakelog.log_end.{p}") for p in range(4)]
"""


def timed(cmd: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    out = subprocess.run(cmd, cwd=PROJECT, env=env, capture_output=True, text=True)
    took = time.perf_counter() - started
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {out.stderr[-2000:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from control_plane.topics import TopicAdmin
    from log_store.config import SparkSettings
    from log_store.session import build_session
    from pipelines.producer import Producer

    root = tempfile.mkdtemp(prefix="lakelog-bench-reads-") + "/root"
    spark = build_session(SparkSettings())
    admin = TopicAdmin(spark, root)
    for i in range(args.topics):
        admin.create(f"t{i}", 4)
    Producer(spark, root, "t0", "p").send(spark.range(1000).selectExpr("cast(id % 50 as string) as key",
                                                                       "cast(id as string) as value", "id as sequence"))
    spark.stop()

    base = {k: v for k, v in os.environ.items() if k != "LAKELOG_FAST_READS"}
    cli = [sys.executable, "-m", "jobs.cli", "--root", root]
    cases = {
        "raw Delta (delta-rs, bare read)": ([sys.executable, "-c", RAW, root, "t0"], base),
        "topics list (delta-rs)": (cli + ["topics", "list", "--json"], base),
        "topics describe (delta-rs)": (cli + ["topics", "describe", "--topic", "t0", "--json"], base),
        "topics list (Spark)": (cli + ["topics", "list", "--json"], {**base, "LAKELOG_FAST_READS": "0"}),
        "topics describe (Spark)": (cli + ["topics", "describe", "--topic", "t0", "--json"],
                                    {**base, "LAKELOG_FAST_READS": "0"}),
    }
    times = {name: statistics.median(timed(cmd, env) for _ in range(args.repeats)) for name, (cmd, env) in cases.items()}
    raw = times["raw Delta (delta-rs, bare read)"]
    table = Table(title=f"read commands, {args.topics} topics, median of {args.repeats} runs, each a new process")
    for col in ("command", "seconds", "x raw Delta"):
        table.add_column(col)
    for name, t in times.items():
        table.add_row(name, f"{t:.2f}", f"{t / raw:.2f}")
    Console().print(table)
    print(f"{platform.node()} {os.cpu_count()} cores, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
          f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
