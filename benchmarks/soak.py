"""A soak: many small produces into one topic with retention and compaction on their usual
schedule, against raw Delta appends of the same rows in the same run.

    .venv/bin/python benchmarks/soak.py [--produces 10000] [--partitions 16,64] [--tick-every 100]
                                        [--retention-bytes N]

Each produce is one lakelog ``Producer.send`` of 100-500 keyed records (sizes drawn from a
fixed seed), exactly as a scheduled job produces; the raw side appends the same rows to a plain
Delta table partitioned the same way (``df.write.format("delta").mode("append")``). Every
``--tick-every`` produces, ``controller tick`` runs (retention by ``retention.bytes``, then
compaction to ``segment.bytes``). Reported per window of the run (first, middle and last tenth of
the produces, or thousand when there are 10,000): produce latency p50/p95 for both; files in the
table, bytes of its Delta log and of its newest checkpoint over time; then a new group's full read
of what is left against a raw sorted read of the same rows (after compaction), and a caught-up
group's batch latency.
Prints tables and writes the figures as JSON to benchmarks/out/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa  # noqa: E402
from deltalake import DeltaTable as RsTable  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from control_plane.controller import TopicController  # noqa: E402
from control_plane.topics import TopicAdmin  # noqa: E402
from log_store.config import SparkSettings  # noqa: E402
from log_store.partitioner import partition_for  # noqa: E402
from log_store.session import build_session  # noqa: E402
from pipelines.consumer import Consumer  # noqa: E402
from pipelines.producer import Producer  # noqa: E402
from pipelines.settings import ConsumerSettings  # noqa: E402

console = Console(stderr=True)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def table_state(path: str) -> tuple[int, int, int]:
    """(data files in the current snapshot, bytes of the _delta_log folder, bytes of its newest
    checkpoint: Delta rewrites it every 10 commits, with the removed files it still remembers)."""
    files = len(RsTable(path).file_uris())
    entries = [f for f in Path(path, "_delta_log").iterdir() if f.is_file()]
    checkpoints = sorted((f for f in entries if ".checkpoint" in f.name and f.suffix == ".parquet"), key=lambda f: f.name)
    return files, sum(f.stat().st_size for f in entries), checkpoints[-1].stat().st_size if checkpoints else 0


def run(spark, workdir: Path, partitions: int, produces: int, tick_every: int, retention_bytes: int) -> dict:
    root = str(workdir / f"root{partitions}")
    raw = str(workdir / f"raw{partitions}")
    topic = "soak"
    TopicAdmin(spark, root).create(topic, partitions)
    ctl = TopicController(spark, root)
    ctl.alter_config(topic, [f"retention.bytes={retention_bytes}", "segment.bytes=8388608"])
    location = TopicAdmin(spark, root).get(topic).location
    producer = Producer(spark, root, topic, "soak")
    rng = random.Random(7)
    keys = [f"key-{i}" for i in range(10_000)]
    part_of = {k: partition_for(k.encode(), partitions) for k in keys}
    sizes = [rng.randint(100, 500) for _ in range(produces)]
    lat, raw_lat, samples, ticks = [], [], [], []
    sent = 0
    began = time.perf_counter()
    for i, n in enumerate(sizes):
        batch_keys = [keys[(sent + j) % len(keys)] for j in range(n)]
        values = [f"{sent + j:0100d}" for j in range(n)]
        df = spark.createDataFrame(pa.table({"key": batch_keys, "value": values}))  # Arrow: no row-by-row pickling
        t = time.perf_counter()
        producer.send(df)
        lat.append(time.perf_counter() - t)
        raw_df = spark.createDataFrame(pa.table({"key": batch_keys, "value": values,
                                                 "partition": pa.array([part_of[k] for k in batch_keys], pa.int32())}))
        t = time.perf_counter()
        raw_df.coalesce(1).write.format("delta").mode("append").partitionBy("partition").save(raw)  # a file per partition
        raw_lat.append(time.perf_counter() - t)
        sent += n
        if (i + 1) % tick_every == 0:
            t = time.perf_counter()
            ctl.tick(topic)
            ticks.append(time.perf_counter() - t)
        if (i + 1) % max(1, produces // 20) == 0 or i + 1 == produces:
            files, log_bytes, checkpoint = table_state(location)
            raw_files, raw_log, raw_checkpoint = table_state(raw)
            samples.append({"produces": i + 1, "files": files, "log_bytes": log_bytes, "checkpoint_bytes": checkpoint,
                            "raw_files": raw_files, "raw_log_bytes": raw_log, "raw_checkpoint_bytes": raw_checkpoint})
            console.print(f"{partitions} partitions: {i + 1}/{produces} produces, {files} files "
                          f"(raw {raw_files}), produce p50 {statistics.median(lat[-50:]) * 1000:.0f} ms")
    ctl.tick(topic)
    window = max(1, produces // 10) if produces < 10_000 else 1000
    windows = {name: (lat[a:a + window], raw_lat[a:a + window])
               for name, a in (("first", 0), ("middle", produces // 2 - window // 2), ("last", produces - window))}
    # a new group's full read of what retention left, against a raw sorted read of the same rows
    snap = TopicAdmin(spark, root).log(topic).snapshot()
    left = sum(snap.log_ends[p] - snap.first_offset(p) for p in snap.readable())
    t = time.perf_counter()
    got = Consumer(spark, root, topic, "newcomer", ConsumerSettings(max_records_per_batch=10**9)).run(lambda b, r: b.write.format("noop").mode("overwrite").save())
    new_read = time.perf_counter() - t
    assert got.records == left, (got.records, left)
    t = time.perf_counter()
    (spark.read.format("delta").load(location).where(F.expr(" OR ".join(
        f"(partition = {p} AND offset >= {snap.first_offset(p)})" for p in snap.readable())))
     .orderBy("partition", "offset").write.format("noop").mode("overwrite").save())
    raw_read = time.perf_counter() - t
    # a caught-up group: one more produce, then its batch
    caught = []
    for _ in range(5):
        producer.send(spark.createDataFrame([(keys[j], "x") for j in range(200)], "key string, value string"))
        t = time.perf_counter()
        Consumer(spark, root, topic, "newcomer").run(lambda b, r: b.write.format("noop").mode("overwrite").save())
        caught.append(time.perf_counter() - t)
    return {
        "partitions": partitions, "produces": produces, "records": sent, "left_after_retention": left,
        "windows": {k: {"p50_ms": statistics.median(a) * 1000, "p95_ms": pct(a, 0.95) * 1000,
                        "raw_p50_ms": statistics.median(b) * 1000, "raw_p95_ms": pct(b, 0.95) * 1000}
                    for k, (a, b) in windows.items()},
        "samples": samples, "tick_p50_s": statistics.median(ticks) if ticks else None,
        "new_group_read_s": new_read, "raw_sorted_read_s": raw_read, "read_ratio": raw_read / new_read,
        "caught_up_batch_p50_s": statistics.median(caught), "wall_s": time.perf_counter() - began,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--produces", type=int, default=10_000)
    ap.add_argument("--partitions", default="16,64")
    ap.add_argument("--tick-every", type=int, default=100)
    ap.add_argument("--retention-bytes", type=int, default=2 * 1024 * 1024)
    args = ap.parse_args()
    spark = build_session(SparkSettings())
    workdir = Path(tempfile.mkdtemp(prefix="lakelog-soak-"))
    results = []
    try:
        for n in [int(x) for x in args.partitions.split(",")]:
            results.append(run(spark, workdir, n, args.produces, args.tick_every, args.retention_bytes))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    out = Table(title=f"soak: {args.produces} produces, tick every {args.tick_every}")
    for col in ("partitions", "window", "produce p50/p95 ms", "raw p50/p95 ms"):
        out.add_column(col)
    for r in results:
        for name, w in r["windows"].items():
            out.add_row(str(r["partitions"]), name, f"{w['p50_ms']:.0f} / {w['p95_ms']:.0f}",
                        f"{w['raw_p50_ms']:.0f} / {w['raw_p95_ms']:.0f}")
    Console().print(out)
    state = Table(title="files and Delta log bytes over time (lakelog / raw)")
    for col in ("partitions", "produces", "files", "raw files", "log KiB", "raw log KiB", "checkpoint KiB",
                "raw checkpoint KiB"):
        state.add_column(col)
    for r in results:
        for s in r["samples"][:: max(1, len(r["samples"]) // 5)] + r["samples"][-1:]:
            state.add_row(str(r["partitions"]), str(s["produces"]), str(s["files"]), str(s["raw_files"]),
                          f"{s['log_bytes'] / 1024:.0f}", f"{s['raw_log_bytes'] / 1024:.0f}",
                          f"{s['checkpoint_bytes'] / 1024:.0f}", f"{s['raw_checkpoint_bytes'] / 1024:.0f}")
    Console().print(state)
    reads = Table(title="reads after the soak")
    for col in ("partitions", "records left", "new group read s", "raw sorted read s", "ratio", "caught-up batch s", "tick p50 s"):
        reads.add_column(col)
    for r in results:
        reads.add_row(str(r["partitions"]), str(r["left_after_retention"]), f"{r['new_group_read_s']:.2f}",
                      f"{r['raw_sorted_read_s']:.2f}", f"{r['read_ratio']:.2f}", f"{r['caught_up_batch_p50_s']:.2f}",
                      f"{r['tick_p50_s']:.2f}" if r["tick_p50_s"] else "-")
    Console().print(reads)
    Path("benchmarks/out").mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    Path(f"benchmarks/out/soak-{stamp}.json").write_text(json.dumps(
        {"machine": platform.node(), "cpus": os.cpu_count(), "args": vars(args), "results": results}, indent=2))


if __name__ == "__main__":
    main()
