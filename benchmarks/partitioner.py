"""Kafka's partitioner over many keys: the JVM function (lakelog_partition) against the pandas UDF
it replaces, and against raw Spark (its built-in Murmur3 ``hash`` pmod n: no Kafka compatibility,
the floor for any per-row function), on the same cached rows in one run.

    .venv/bin/python benchmarks/partitioner.py [--records 1000000] [--keys 10000] [--repeats 3]

Prints median seconds and ratios; the numbers go to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark.sql import functions as F  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from log_store.config import SparkSettings  # noqa: E402
from log_store.partitioner import JVM_FUNCTION, _pandas_partition, jvm_partitioner  # noqa: E402
from log_store.session import build_session  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    spark = build_session(SparkSettings())
    assert jvm_partitioner(spark), "run `make setup`: lakelog_partition is not built"
    rows = spark.range(args.records).select(
        F.concat(F.lit("key-"), (F.col("id") % args.keys).cast("string")).cast("binary").alias("key"),
        F.col("id").alias("sequence")).persist()
    rows.count()
    n = F.lit(args.partitions)
    ways = {
        "raw Spark: pmod(hash(key), n)": F.pmod(F.hash("key"), n),
        "lakelog_partition (JVM)": F.call_function(JVM_FUNCTION, F.col("key"), F.col("sequence"), n),
        "pandas UDF (kafka-python)": _pandas_partition()("key", "sequence", n),
    }
    times: dict[str, float] = {}
    for name, column in ways.items():
        runs = []
        for _ in range(args.repeats + 1):  # the first run warms up
            start = time.perf_counter()
            rows.select(column.alias("p")).agg(F.sum("p")).collect()
            runs.append(time.perf_counter() - start)
        times[name] = statistics.median(runs[1:])
    raw = times["raw Spark: pmod(hash(key), n)"]
    table = Table(title=f"partitioning {args.records:,} keys ({args.keys:,} distinct) over {args.partitions} "
                        f"partitions, median of {args.repeats} (Spark {spark.version}, {platform.machine()}, "
                        f"{datetime.now(timezone.utc):%Y-%m-%d})")
    for col in ("way", "seconds", "records/s", "x raw Spark"):
        table.add_column(col)
    for name, t in times.items():
        table.add_row(name, f"{t:.2f}", f"{args.records / t:,.0f}", f"{t / raw:.2f}")
    Console().print(table)


if __name__ == "__main__":
    main()
