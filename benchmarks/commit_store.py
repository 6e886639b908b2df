"""Commit store benchmark: what lakelog's put-if-absent log store costs against Delta's default
store for the same scheme, on the local disk and on an S3 emulator, in one run.

Two figures per (store, target), each over REPEATS commits after warm-up, in a process of its
own (the log store is a setting of the JVM):

- ``commit``: one blind Delta commit of a one-row file (lakelog's engine: a Parquet file made by
  pyarrow, then Delta's optimistic transaction; the commit file is what the store writes);
- ``produce 100``: ``Producer.send`` of 100 keyed records into a 4-partition topic (the fenced,
  idempotent append every produce makes).

Delta's defaults: ``HDFSLogStore`` for ``file:`` (check, then a rename that replaces) and
``S3SingleDriverLogStore`` for ``s3a:`` (check, then a plain PUT); lakelog's: a hard link on the
local disk, a conditional PUT on S3 (docs/operating.md). The S3 figures are against moto on this
machine, not S3: they compare the stores' requests, not S3's latency.

Run: make bench-commit (or .venv/bin/python benchmarks/commit_store.py [REPEATS]); --json prints
the figures as JSON.
"""

from __future__ import annotations

import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

STORES = {"lakelog": "lakelog.storage.PutIfAbsentLogStore",
          "delta": "Delta's default (HDFSLogStore / S3SingleDriverLogStore)"}


def percentiles(times: list[float]) -> dict[str, float]:
    times = sorted(times)
    return {"p50_ms": round(statistics.median(times) * 1000, 1),
            "p95_ms": round(times[min(len(times) - 1, int(len(times) * 0.95))] * 1000, 1)}


def measure(store: str, target: str, endpoint: str, repeats: int) -> dict:
    """In this process: the two figures for one store on one target."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    from control_plane.topics import TopicAdmin
    from log_store.config import SparkSettings
    from log_store.engine import DeltaTransaction
    from log_store.session import build_session
    from pipelines.producer import Producer

    conf = {}
    if target == "s3":
        from tests.s3_emulator import S3Emulator

        emulator = S3Emulator()
        emulator.endpoint = endpoint
        conf = emulator.spark_conf()
        base = f"s3a://bench-{store}"
        emulator.create_bucket(f"bench-{store}")
    else:
        base = tempfile.mkdtemp(prefix=f"lakelog-bench-commit-{store}-")
    spark = build_session(SparkSettings(log_store=store, conf=conf))
    table = f"{base}/commits"
    spark.createDataFrame([], "writer string, i int").write.format("delta").save(table)

    def commit(i: int) -> None:
        txn = DeltaTransaction.start(spark, table)
        txn.write_rows(pa.table({"writer": ["bench"], "i": [i]}))
        txn.commit({})

    root = f"{base}/root"
    TopicAdmin(spark, root).create("bench", 4)
    producer = Producer(spark, root, "bench", "bench-producer")
    batches = [spark.range(i * 100, (i + 1) * 100).select(
        F.concat(F.lit("k"), (F.col("id") % 10).cast("string")).alias("key"),
        F.col("id").cast("string").alias("value"), F.col("id").alias("sequence")).cache() for i in range(repeats + 3)]
    for b in batches:
        b.count()
    out = {}
    for name, fn in (("commit", commit), ("produce 100", lambda i: producer.send(batches[i]))):
        for i in range(3):  # warm-up
            fn(i)
        times = []
        for i in range(3, repeats + 3):
            started = time.perf_counter()
            fn(i)
            times.append(time.perf_counter() - started)
        out[name] = percentiles(times)
    return out


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if "--child" in sys.argv:
        store, target, endpoint, repeats = args
        print(json.dumps(measure(store, target, endpoint, int(repeats))), flush=True)
        for folder in Path(tempfile.gettempdir()).glob(f"lakelog-bench-commit-{store}-*"):
            shutil.rmtree(folder, ignore_errors=True)
        return
    from rich.console import Console
    from rich.table import Table

    from tests.s3_emulator import S3Emulator

    repeats = int(args[0]) if args else 30
    started = datetime.now(timezone.utc)
    figures: dict[str, dict[str, dict]] = {}
    with S3Emulator() as s3:
        for target in ("local", "s3"):
            for store in STORES:
                proc = subprocess.run([sys.executable, __file__, "--child", store, target, s3.endpoint, str(repeats)],
                                      capture_output=True, text=True, cwd=PROJECT)
                if proc.returncode != 0:
                    raise SystemExit(f"{store} on {target} failed:\n{proc.stderr[-3000:]}")
                figures.setdefault(target, {})[store] = json.loads(proc.stdout.strip().splitlines()[-1])
    result = {"date": started.isoformat(timespec="seconds"), "machine": platform.platform(),
              "repeats": repeats, "figures": figures}
    if "--json" in sys.argv:
        print(json.dumps(result, indent=2))
        return
    table = Table(title=f"commit store, {repeats} each, {started:%Y-%m-%d %H:%M} UTC")
    for column in ("target", "case", "Delta's default p50 / p95 ms", "lakelog's p50 / p95 ms", "lakelog / default (p50)"):
        table.add_column(column)
    for target, stores in figures.items():
        for case in stores["lakelog"]:
            d, l_ = stores["delta"][case], stores["lakelog"][case]
            table.add_row(target, case, f"{d['p50_ms']} / {d['p95_ms']}", f"{l_['p50_ms']} / {l_['p95_ms']}",
                          f"{l_['p50_ms'] / d['p50_ms']:.2f}")
    Console().print(table)


if __name__ == "__main__":
    main()
