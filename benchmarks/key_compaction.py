"""Key compaction (``cleanup.policy=compact``) against raw Delta doing the same work on the same
rows, in one run.

    .venv/bin/python benchmarks/key_compaction.py [--records 1000000] [--keys 10000] [--partitions 8]
        [--produces 10] [--repeats 3] [--quick] [--json] [--json-out FILE]

A compacted topic of RECORDS keyed records (KEYS keys, each updated RECORDS / KEYS times) is
produced in PRODUCES sends, the log built over time as a compacted topic's is; a plain Delta
table gets the same rows (the log's own partition and offset, partitioned by ``partition``, one
append per send). Then:

- compaction: the controller's key compaction (``TopicController.compact_keys``, what
  ``lakelog topics compact --keys`` and a tick run) until nothing is due, against raw Delta
  keeping the latest row per key by overwriting its table (read, ``row_number`` over the key by
  offset, overwrite partitioned alike); files and bytes of each table's snapshot, records, before
  and after;
- the latest state per key, before and after compaction: (a) ``spark.read.format("lakelog")``
  reduced to each key's latest record (``row_number``, as ``pipelines.spark.table_view`` does)
  into the noop sink, against ``spark.read.format("delta")`` of the plain table reduced alike;
  (b) ``lakelog topics table`` (in this process, through click, on this Spark session: no JVM
  start) building the table view from scratch, against the plain table read, reduced alike and
  written as a new Delta table.

Reads are the median of REPEATS after a warm-up on a small topic (not timed); the produce and the
compactions run once. Ratios are raw time / lakelog time (1.0 is parity, higher is better for
lakelog). ``--quick``: 100,000 records and one repeat, a smoke run. Prints a table; writes the
figures as JSON to benchmarks/out/key_compaction-<time>.json (or --json-out).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from click.testing import CliRunner  # noqa: E402
from pyspark.sql import DataFrame, Window  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from control_plane.controller import TopicController  # noqa: E402
from control_plane.topics import TopicAdmin  # noqa: E402
from jobs.cli import cli  # noqa: E402
from log_store.config import SparkSettings  # noqa: E402
from log_store.session import build_session  # noqa: E402
from pipelines.producer import Producer  # noqa: E402
from pipelines.spark import register  # noqa: E402

console = Console(stderr=True)
COLUMNS = ["key", "value", "partition", "offset", "timestamp"]


def timed(fn) -> tuple[float, object]:
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


def median_of(repeats: int, fn) -> float:
    return statistics.median(timed(lambda i=i: fn(i))[0] for i in range(repeats))


def latest_per_key(records: DataFrame) -> DataFrame:
    """Each key's row with the highest offset (a key lives in one partition: Kafka's partitioner)."""
    newest_first = Window.partitionBy("key").orderBy(F.col("offset").desc())
    return (records.where(F.col("key").isNotNull()).select(*COLUMNS)
            .withColumn("_rank", F.row_number().over(newest_first)).where("_rank = 1").drop("_rank"))


def files(spark, path: str) -> tuple[int, int, int]:
    """Data files, their bytes (the table's current snapshot) and its rows."""
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()
    return detail["numFiles"], detail["sizeInBytes"], spark.read.format("delta").load(path).count()


def measure(spark, root: str, work: Path, topic: str, records: int, keys: int, partitions: int, produces: int,
            repeats: int) -> dict:
    """Produce, compact and read ``topic`` and the plain table beside it; the figures."""
    admin = TopicAdmin(spark, root)
    admin.create(topic, partitions)
    ctl = TopicController(spark, root)
    ctl.alter_config(topic, ["cleanup.policy=compact"])
    log = admin.get(topic).location
    raw = str(work / f"{topic}-raw")
    runner = CliRunner()

    def rows(n: int, start: int) -> DataFrame:
        return spark.range(start, start + n).select(
            F.concat(F.lit("k"), (F.col("id") % keys).cast("string")).alias("key"),
            F.sha2(F.col("id").cast("string"), 256).alias("value"))

    # -- produce, and the same rows into the plain table ------------------------------------------
    producer = Producer(spark, root, topic, "loader")
    produce_s, start = 0.0, 0
    for i in range(produces):
        n = records // produces + (1 if i < records % produces else 0)
        ends = admin.log(topic).log_end_offsets()
        t, _ = timed(lambda: producer.send(rows(n, start), rows=n))
        produce_s += t
        start += n
        new = " OR ".join(f"(partition = {p} AND offset >= {e})" for p, e in ends.items())
        (spark.read.format("delta").load(log).where(new).select(*COLUMNS).repartition("partition")
         .write.format("delta").partitionBy("partition").mode("append").save(raw))

    def lakelog_read(_i: int) -> None:
        latest_per_key(spark.read.format("lakelog").option("root", root).option("subscribe", topic).load()) \
            .write.format("noop").mode("overwrite").save()

    def raw_read(_i: int) -> None:
        latest_per_key(spark.read.format("delta").load(raw)).write.format("noop").mode("overwrite").save()

    def table_view(stage: str):
        def run(i: int) -> None:
            out = runner.invoke(cli, ["--root", root, "topics", "table", "--topic", topic, "--json",
                                      "--output", str(work / f"{topic}-view-{stage}-{i}"),
                                      "--checkpoint", str(work / f"{topic}-ck-{stage}-{i}")], catch_exceptions=False)
            if out.exit_code != 0:
                raise SystemExit(f"lakelog topics table failed: {out.output[-2000:]}")
            got = json.loads(out.stdout)
            assert got["keys"] == keys, got
        return run

    def raw_table(stage: str):
        def run(i: int) -> None:
            out = str(work / f"{topic}-rawview-{stage}-{i}")
            latest_per_key(spark.read.format("delta").load(raw)).where("value IS NOT NULL") \
                .write.format("delta").save(out)
            assert spark.read.format("delta").load(out).count() == keys
        return run

    def reads(stage: str) -> dict:
        return {"read_s": median_of(repeats, lakelog_read), "raw_read_s": median_of(repeats, raw_read),
                "table_s": median_of(repeats, table_view(stage)), "raw_table_s": median_of(repeats, raw_table(stage))}

    before = {"files": files(spark, log), "raw_files": files(spark, raw), **reads("before")}
    assert before["files"][2] == before["raw_files"][2] == records, (before, records)

    # -- compaction until nothing is due ----------------------------------------------------------
    def compact_all() -> tuple[list, int]:
        done, passes = [], 0
        while True:
            found = ctl.compact_keys(topic)
            if not found:
                return done, passes
            done += found
            passes += 1

    compact_s, (done, passes) = timed(compact_all)
    cleaned = sorted({c.partition for c in done})
    assert cleaned == list(range(partitions)), cleaned

    def raw_compact() -> None:
        latest_per_key(spark.read.format("delta").load(raw)).repartition("partition") \
            .write.format("delta").partitionBy("partition").mode("overwrite").save(raw)

    raw_compact_s, _ = timed(raw_compact)
    after = {"files": files(spark, log), "raw_files": files(spark, raw), **reads("after")}
    assert after["files"][2] == after["raw_files"][2] == keys, (after, keys)
    return {"records": records, "keys": keys, "partitions": partitions, "produces": produces, "repeats": repeats,
            "produce_s": produce_s, "compact_s": compact_s, "compact_passes": passes,
            "compact_commits": len({c.version for c in done}), "raw_compact_s": raw_compact_s,
            "before": before, "after": after}


def report(f: dict, started: datetime, load: tuple[float, float]) -> Table:
    b, a = f["before"], f["after"]

    def ratio(ll: float, ref: float) -> str:
        return f"{ref / ll:.2f}"

    def size(fs: tuple[int, int, int]) -> str:
        return f"{fs[0]:,} files, {fs[1] / 2**20:.1f} MiB, {fs[2]:,} records"

    table = Table(title=f"key compaction, {f['records']:,} records, {f['keys']:,} keys, {f['partitions']} partitions, "
                        f"{f['produces']} produces ({started:%Y-%m-%d %H:%M} UTC, {platform.node()}, {os.cpu_count()} "
                        f"cores, load {load[0]:.2f} -> {load[1]:.2f}); ratio = raw / lakelog")
    for col in ("case", "lakelog", "raw Delta", "ratio"):
        table.add_column(col)
    table.add_row("produce", f"{f['produce_s']:.2f} s ({f['records'] / f['produce_s']:,.0f} rec/s)", "", "")
    table.add_row("compaction, every partition until none is due",
                  f"{f['compact_s']:.2f} s ({f['compact_passes']} pass(es), {f['compact_commits']} commit(s))",
                  f"{f['raw_compact_s']:.2f} s (read, latest per key, overwrite)", ratio(f["compact_s"], f["raw_compact_s"]))
    table.add_row("before compaction", size(b["files"]), size(b["raw_files"]), "")
    table.add_row("after compaction", size(a["files"]), size(a["raw_files"]), "")
    for stage, r in (("before", b), ("after", a)):
        table.add_row(f"latest per key, batch read, {stage}", f"{r['read_s']:.2f} s (format(\"lakelog\"))",
                      f"{r['raw_read_s']:.2f} s (format(\"delta\"))", ratio(r["read_s"], r["raw_read_s"]))
        table.add_row(f"table view from scratch, {stage}", f"{r['table_s']:.2f} s (lakelog topics table)",
                      f"{r['raw_table_s']:.2f} s (read, latest per key, write)", ratio(r["table_s"], r["raw_table_s"]))
    table.add_row("compaction's gain on reads", f"batch {b['read_s'] / a['read_s']:.1f}x, table view "
                  f"{b['table_s'] / a['table_s']:.1f}x faster", f"batch {b['raw_read_s'] / a['raw_read_s']:.1f}x, table "
                  f"{b['raw_table_s'] / a['raw_table_s']:.1f}x", "")
    return table


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--produces", type=int, default=10, help="sends the records arrive in")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each read (the median)")
    parser.add_argument("--quick", action="store_true", help="100,000 records and one repeat: a smoke run")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--json-out", help="where to write the figures (default: benchmarks/out/key_compaction-<time>.json)")
    args = parser.parse_args()
    if args.quick:
        args.records, args.repeats = 100_000, 1
    if args.keys > args.records or args.produces > args.records:
        parser.error("--keys and --produces must not be above --records")

    load_before = os.getloadavg()[0]
    started = datetime.now(timezone.utc)
    work = Path(tempfile.mkdtemp(prefix="lakelog-bench-compaction-"))
    spark = build_session(SparkSettings())
    try:
        root = str(work / "root")
        register(spark, root)
        console.print("warming up (not timed) ...")
        measure(spark, root, work, "warm", 20_000, 1_000, 2, 2, 1)
        console.print(f"{args.records:,} records, {args.keys:,} keys, {args.partitions} partitions ...")
        figures = measure(spark, root, work, "bench", args.records, args.keys, args.partitions, args.produces,
                          args.repeats)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    load = (load_before, os.getloadavg()[0])
    figures.update(date=started.isoformat(), machine=platform.node(), cpus=os.cpu_count(), load=load,
                   took_s=(datetime.now(timezone.utc) - started).total_seconds())
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        Console(width=160).print(report(figures, started, load))
    out = Path(args.json_out) if args.json_out else \
        Path(__file__).resolve().parent / "out" / f"key_compaction-{started:%Y%m%dT%H%M%SZ}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2))
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
