"""The table layouts a topic's log could take, measured on raw Delta with the same rows.

    .venv/bin/python benchmarks/layouts.py [--records 1000000] [--partitions 8,64]

The rows carry the log's columns with their partition and dense offset already set, so only the
layout differs:

- ``partitioned``: ``partitionBy("partition")`` (the log's layout today): each write task writes
  one file per log partition it holds;
- ``mixed``: no Delta partitioning; each write task writes one file holding every log partition,
  its rows sorted by (partition, offset), so a file's statistics bound both columns;
- ``arrival``: no Delta partitioning and no sort: each write task writes one file of its rows as
  they came, every log partition mixed, numbered as a produce numbers them (a counting job per
  task and partition, then a base and the row's index: ``log_store.numbering.counted_offsets``);
  the offsets are not precomputed here, so its time includes the numbering;
- ``plain``: a raw unpartitioned append of the rows as they come (the ceiling).

For each: the append's time, files written, and two reads: one partition's 10,000-record range
(what a caught-up consumer or stream batch reads) and everything in (partition, offset) order.
Prints a table with ratios against ``plain``; docs/design.md quotes it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark.sql import Window  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from benchmarks.produce_consume import timed  # noqa: E402
from log_store.config import SparkSettings  # noqa: E402
from log_store.numbering import counted_offsets  # noqa: E402
from log_store.session import build_session  # noqa: E402

console = Console(stderr=True)


def arriving(spark, n: int, partitions: int):
    """The rows as a produce gets them: key, value, partition by the key, sequence, in sequence
    order within each of as many tasks as the machine has cores; no offsets yet."""
    keyed = spark.range(0, n, 1, spark.sparkContext.defaultParallelism).select(
        F.concat(F.lit("key-"), (F.col("id") % 10_000).cast("string")).alias("key"),
        F.rpad(F.col("id").cast("string"), 100, "x").alias("value"), F.col("id").alias("sequence"))
    return keyed.withColumn("partition", (F.abs(F.hash("key")) % partitions).cast("int"))


def rows(spark, n: int, partitions: int):
    """The log's columns: key, value, partition by the key, offset dense per partition."""
    parted = arriving(spark, n, partitions)
    # dense per partition, as the log numbers them (id order stands for append order)
    offset = F.row_number().over(Window.partitionBy("partition").orderBy("sequence")) - 1
    return (parted.select("partition", offset.alias("offset"), F.lit(0).alias("leader_epoch"), "key", "value", "sequence")
            .repartition(spark.sparkContext.defaultParallelism))  # as many write tasks as a produce has


def write(data, path: str, layout: str) -> None:
    if layout == "partitioned":
        data.write.format("delta").partitionBy("partition").save(path)
    elif layout == "mixed":
        data.sortWithinPartitions("partition", "offset").write.format("delta").save(path)
    elif layout == "arrival":
        offset = counted_offsets(data.sparkSession, data, {})
        assert offset is not None, "the arriving rows are in sequence order"
        data.select("partition", offset.alias("offset"), F.lit(0).alias("leader_epoch"), "key", "value", "sequence"
                    ).write.format("delta").save(path)
    else:
        data.write.format("delta").save(path)


def files(spark, path: str) -> int:
    return spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["numFiles"]


def measure(spark, work: Path, n: int, partitions: int) -> list[dict]:
    data = rows(spark, n, partitions).persist()
    data.count()
    # A range in the middle of partition 0, as a caught-up reader asks for it.
    hi = data.where("partition = 0").agg(F.max("offset")).first()[0]
    lo = max(hi // 2, 0)
    arrived = arriving(spark, n, partitions).persist()
    arrived.count()
    out = []
    for layout in ("plain", "partitioned", "mixed", "arrival"):
        path = str(work / f"{layout}-{partitions}")
        t_write, _ = timed(lambda: write(arrived if layout == "arrival" else data, path, layout))
        table = spark.read.format("delta").load(path)
        rng = table.where(f"partition = 0 AND offset >= {lo} AND offset < {lo + 10_000}")
        t_range, got = timed(lambda: rng.count())
        t_all, _ = timed(lambda: table.orderBy("partition", "offset").write.format("noop").mode("overwrite").save())
        out.append({"layout": layout, "partitions": partitions, "write_s": t_write, "files": files(spark, path),
                    "range_s": t_range, "range_rows": got, "ordered_read_s": t_all})
        console.print(out[-1])
    data.unpersist()
    arrived.unpersist()
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", default="8,64")
    args = parser.parse_args()
    spark = build_session(SparkSettings())
    work = Path(tempfile.mkdtemp(prefix="lakelog-layouts-"))
    results = []
    try:
        measure(spark, work / "warm", 100_000, 8)  # the JVM's first writes and reads, not timed
        for p in [int(x) for x in args.partitions.split(",")]:
            results += measure(spark, work, args.records, p)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    table = Table(title=f"layouts of {args.records:,} log records on raw Delta (ratio: plain time / this time)")
    for col in ("partitions", "layout", "files", "append s", "append ratio", "10k range s", "ordered read s"):
        table.add_column(col)
    for r in results:
        plain = next(x for x in results if x["partitions"] == r["partitions"] and x["layout"] == "plain")
        table.add_row(str(r["partitions"]), r["layout"], str(r["files"]), f"{r['write_s']:.2f}",
                      f"{plain['write_s'] / r['write_s']:.2f}", f"{r['range_s']:.2f}", f"{r['ordered_read_s']:.2f}")
    Console().print(table)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
