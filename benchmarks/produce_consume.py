"""Produce and consume throughput of lakelog against raw Delta on the same rows, in one run.

    .venv/bin/python benchmarks/produce_consume.py [--records 1000000] [--partitions 8,64]
    .venv/bin/python benchmarks/produce_consume.py --records 1000000,10000000 --small-produces 0

Prints a table of times and ratios (lakelog / raw Delta throughput, or latency ratio) and writes
the figures as JSON to benchmarks/out/. Every comparison uses the same cached source rows. With
several record counts, the bulk cases run at each and a second table shows the cost per record
of each case against the smallest count and partition count (the aim: flat within 20 %).
"""

from __future__ import annotations

import argparse
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

from pyspark.sql import functions as F  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from control_plane.topics import TopicAdmin  # noqa: E402
from log_store.config import SparkSettings  # noqa: E402
from pipelines.settings import ConsumerSettings, ProducerSettings  # noqa: E402
from log_store.session import build_session  # noqa: E402
from pipelines.consumer import Consumer  # noqa: E402
from pipelines.producer import Producer  # noqa: E402

console = Console(stderr=True)


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def source(spark, n: int, keys: int, value_bytes: int, start: int = 0):
    return spark.range(start, start + n).select(
        F.concat(F.lit("key-"), (F.col("id") % keys).cast("string")).alias("key"),
        F.rpad(F.col("id").cast("string"), value_bytes, "x").alias("value"),
        F.col("id").alias("sequence"),
    )


def warm_up(spark, work: Path, args) -> None:
    """Both paths once on a scratch copy before anything is timed: the JVM's first Delta write,
    read and commit (class loading, code generation, JIT) would otherwise count against
    whichever case runs first (raw appends of the same rows differed 3x between the first and
    the second partition count)."""
    console.print("warming up: a raw Delta append and read, a lakelog produce and consume (not timed) ...")
    data = source(spark, 200_000, args.keys, args.value_bytes)
    data.write.format("delta").save(str(work / "warm-raw"))
    spark.read.format("delta").load(str(work / "warm-raw")).write.format("noop").mode("overwrite").save()
    root = str(work / "warm-root")
    TopicAdmin(spark, root).create("warm", 8)
    Producer(spark, root, "warm", "warm-producer").send(data)
    Consumer(spark, root, "warm", "warm-group").run(lambda df, _r: df.write.format("noop").mode("overwrite").save())
    Consumer(spark, root, "warm", "warm-sink").run_to_sink(str(work / "warm-sink"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", default="1000000", help="record count, or several: 1000000,10000000")
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--partitions", default="8,64")
    ap.add_argument("--small-produces", type=int, default=200)
    ap.add_argument("--small-size", type=int, default=100)
    ap.add_argument("--json-out", help="where to write the figures (default: benchmarks/out/produce_consume*.json)")
    args = ap.parse_args()

    spark = build_session(SparkSettings())
    work = Path(tempfile.mkdtemp(prefix="lakelog-bench-"))
    rows: list[dict] = []
    sizes = [int(x) for x in args.records.split(",")]
    try:
        warm_up(spark, work, args)
        for records in sizes:
            rows += bulk(spark, work / f"n{records}", args, records, layout=records == sizes[0])
        small(spark, work, args, rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    table = Table(title="lakelog vs raw Delta (ratio: throughput share for bulk rows, latency multiple for p50/p95)")
    for col in ("case", "raw Delta s", "lakelog s", "ratio", "aim"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["case"], f"{r['raw_s']:.2f}", f"{r['lakelog_s']:.2f}", f"{r['ratio']:.2f}", r["aim"])
    Console().print(table)
    scaling = per_record(rows) if len(sizes) > 1 else []
    if scaling:
        table = Table(title="cost per record (microseconds) against the smallest count and partition count (aim: within 20 %)")
        for col in ("kind", "records", "partitions", "raw Delta us", "lakelog us", "lakelog x base"):
            table.add_column(col)
        for r in scaling:
            table.add_row(r["kind"], f"{r['records']:,}", str(r["partitions"]), f"{r['raw_us']:.2f}", f"{r['lakelog_us']:.2f}",
                          f"{r['vs_base']:.2f}")
        Console().print(table)
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    meta = {"date": datetime.now(timezone.utc).isoformat(), "machine": f"{platform.node()} {platform.machine()} "
            f"{__import__('os').cpu_count()} cores", "args": vars(args), "results": rows, "per_record": scaling}
    name = "produce_consume.json" if len(sizes) == 1 else "produce_consume_scaling.json"
    Path(args.json_out or out / name).write_text(json.dumps(meta, indent=2))


def per_record(rows: list[dict]) -> list[dict]:
    """Microseconds per record of each bulk case, and its multiple of the same kind's cost at the
    smallest record count and partition count of the run."""
    bulk_rows = [r for r in rows if "kind" in r]
    base: dict[str, float] = {}
    out = []
    for r in sorted(bulk_rows, key=lambda r: (r["kind"], r["records"], r["partitions"])):
        us = r["lakelog_s"] / r["records"] * 1e6
        base.setdefault(r["kind"], us)
        out.append({"kind": r["kind"], "records": r["records"], "partitions": r["partitions"],
                    "raw_us": r["raw_s"] / r["records"] * 1e6, "lakelog_us": us, "vs_base": us / base[r["kind"]]})
    return out


def bulk(spark, work: Path, args, records: int, layout: bool) -> list[dict]:
    """Produce, consume (and for the fewest partitions, consume into a sink) ``records`` rows
    against raw Delta on the same cached rows, at each partition count; with ``layout``, also
    raw Delta's one-table-per-partition alternative at the most partitions."""
    rows: list[dict] = []
    parts = [int(x) for x in args.partitions.split(",")]
    data = source(spark, records, args.keys, args.value_bytes).persist()
    data.count()

    def row(case: str, kind: str, n_parts: int, raw_s: float, lakelog_s: float, aim: str) -> dict:
        return {"case": case, "kind": kind, "records": records, "partitions": n_parts, "raw_s": raw_s,
                "lakelog_s": lakelog_s, "ratio": raw_s / lakelog_s, "aim": aim}

    try:
        for n_parts in parts:
            root = str(work / f"root{n_parts}")
            raw = str(work / f"raw{n_parts}")
            TopicAdmin(spark, root).create("bench", n_parts)
            console.print(f"[{records:,} records, {n_parts} partitions] raw Delta append ...")
            t_raw, _ = timed(lambda: data.write.format("delta").mode("append").save(raw))
            console.print(f"[{records:,} records, {n_parts} partitions] lakelog produce ...")
            producer = Producer(spark, root, "bench", "bench-producer", ProducerSettings(batch_size=records))
            t_prod, res = timed(lambda: producer.send(data))
            assert res.appended == records
            rows.append(row(f"produce {records:,} -> {n_parts} partitions", "produce", n_parts, t_raw, t_prod,
                            ">= 0.8 of raw throughput"))
            # The log is partitioned: the same rows appended raw into as many partition directories.
            parted = data.withColumn("p", F.abs(F.hash("key")) % n_parts)
            t_parted, _ = timed(lambda: parted.write.format("delta").partitionBy("p").mode("append")
                                .save(str(work / f"raw-parted{n_parts}")))
            rows.append({"case": f"produce {records:,} -> {n_parts} partitions, vs a raw append partitioned alike",
                         "raw_s": t_parted, "lakelog_s": t_prod, "ratio": t_parted / t_prod, "aim": "(yardstick: partitionBy)"})
            console.print(f"[{records:,} records, {n_parts} partitions] consume ...")
            t_read, _ = timed(lambda: spark.read.format("delta").load(raw).write.format("noop").mode("overwrite").save())
            consumer = Consumer(spark, root, "bench", "bench-group", ConsumerSettings(max_records_per_batch=records))
            t_cons, cres = timed(lambda: consumer.run(lambda df, _r: df.write.format("noop").mode("overwrite").save()))
            assert cres.records == records
            rows.append(row(f"consume {records:,} from {n_parts} partitions", "consume", n_parts, t_read, t_cons,
                            ">= 0.9 of raw throughput"))
            # A handler gets its batch in (partition, offset) order: the same rows read raw in that order.
            t_sorted, _ = timed(lambda: spark.read.format("delta").load(raw)
                                .orderBy(F.abs(F.hash("key")) % n_parts, "sequence").write.format("noop").mode("overwrite").save())
            rows.append({"case": f"consume {records:,} from {n_parts} partitions, vs a raw read sorted alike",
                         "raw_s": t_sorted, "lakelog_s": t_cons, "ratio": t_sorted / t_cons, "aim": "(yardstick: orderBy)"})
            if n_parts == min(parts):
                console.print(f"[{records:,} records, {n_parts} partitions] consume exactly once into a Delta sink ...")
                t_copy, _ = timed(lambda: spark.read.format("delta").load(raw).write.format("delta").save(str(work / "rawsink")))
                sinker = Consumer(spark, root, "bench", "bench-sink", ConsumerSettings(max_records_per_batch=records))
                t_sink, sres = timed(lambda: sinker.run_to_sink(str(work / "sink")))
                assert sres.records == records
                rows.append(row(f"consume {records:,} into a Delta sink (exactly once)", "consume into a sink", n_parts,
                                t_copy, t_sink, "(raw: read + append)"))
            # The alternative layout: one Delta table per partition means one commit per partition.
            if layout and n_parts == max(parts):
                console.print(f"[{n_parts} partitions] raw Delta, one table per partition ({n_parts} commits) ...")
                parted = data.withColumn("p", F.abs(F.hash("key")) % n_parts).persist()
                parted.count()
                t_one, _ = timed(lambda: parted.write.format("delta").partitionBy("p").mode("append").save(str(work / "one")))
                t_many, _ = timed(lambda: [parted.where(F.col("p") == p).write.format("delta").mode("append").save(str(work / f"many/{p}"))
                                           for p in range(n_parts)])
                parted.unpersist()
                rows.append({"case": f"raw Delta: {n_parts} tables (1 commit each) vs 1 partitioned table", "raw_s": t_one,
                             "lakelog_s": t_many, "ratio": t_one / t_many, "aim": "layout choice (not lakelog)"})
    finally:
        data.unpersist()
    return rows


def small(spark, work: Path, args, rows: list[dict]) -> None:
    """Sequential small produces against raw appends of the same rows: p50 and p95 latency."""
    if args.small_produces < 2:
        return
    console.print(f"{args.small_produces} sequential produces of {args.small_size} records ...")
    root = str(work / "small")
    TopicAdmin(spark, root).create("small", 8)
    producer = Producer(spark, root, "small", "small-producer", ProducerSettings(batch_size=args.small_size))
    lat_l, lat_r = [], []
    for i in range(args.small_produces):
        batch = source(spark, args.small_size, args.keys, args.value_bytes, start=i * args.small_size)
        lat_l.append(timed(lambda: producer.send(batch))[0])
        lat_r.append(timed(lambda: batch.write.format("delta").mode("append").save(str(work / "small-raw")))[0])
        if (i + 1) % 20 == 0:
            console.print(f"  {i + 1}/{args.small_produces}")

    def pct(xs, q):
        return statistics.quantiles(xs, n=100)[q - 1]

    for q in (50, 95):
        rows.append({"case": f"{args.small_produces} produces of {args.small_size}: p{q} latency", "raw_s": pct(lat_r, q),
                     "lakelog_s": pct(lat_l, q), "ratio": pct(lat_l, q) / pct(lat_r, q), "aim": "<= 1.5x raw latency"})


if __name__ == "__main__":
    main()
