"""Gating benchmark: consuming across a resize vs the same data with no resize, in one run.

- ``steady``: N keyed records on an 8-partition topic that was never resized.
- ``resized``: the same N records on a topic created with 4 partitions, half produced before a
  grow to 8 and half after, so every batch passes through the resize gates.
Both are consumed exactly once into a Delta sink by one consumer with the same batch size; as
the raw-Delta yardstick, the same rows are read from the log and appended to a plain Delta
table. It also reports how long after the prior partitions pass their thresholds the first
new partition delivers, and checks per-key order in the resized sink.

Run: make bench-gating  (or .venv/bin/python benchmarks/gating.py [RECORDS] [BATCH])
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark.sql import functions as F  # noqa: E402
from rich.console import Console  # noqa: E402

from control_plane.controller import TopicController  # noqa: E402
from control_plane.topics import TopicAdmin  # noqa: E402
from jobs.output import emit  # noqa: E402
from log_store.config import SparkSettings  # noqa: E402
from pipelines.settings import ConsumerSettings  # noqa: E402
from log_store.session import build_session  # noqa: E402
from pipelines.consumer import Consumer  # noqa: E402
from pipelines.producer import Producer  # noqa: E402

console = Console(stderr=True)


def records(spark, start: int, n: int, keys: int = 10_000):
    return spark.range(start, start + n).select(
        F.concat(F.lit("k"), (F.col("id") % keys).cast("string")).alias("key"),
        F.expr("repeat('x', 100)").alias("value"),
        F.col("id").alias("sequence"),
    )


class TimedConsumer(Consumer):
    """Records when each batch finished and what it delivered."""

    batches: list[tuple[float, dict]]

    def deliver(self, *args, **kwargs):
        ranges = super().deliver(*args, **kwargs)
        self.batches.append((time.perf_counter(), dict(ranges)))
        return ranges


def consume(spark, root: str, topic: str, sink: str, batch: int) -> tuple[float, TimedConsumer]:
    consumer = TimedConsumer(spark, root, topic, "bench", ConsumerSettings(max_records_per_batch=batch))
    consumer.batches = []
    started = time.perf_counter()
    result = consumer.run_to_sink(sink)
    return result.records / (time.perf_counter() - started), consumer


def main(n: int = 400_000, batch: int = 50_000) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="lakelog-bench-gating-"))
    root = str(tmp / "root")
    spark = build_session(SparkSettings())
    try:
        admin = TopicAdmin(spark, root)
        admin.create("steady", 8)
        Producer(spark, root, "steady", "p").send(records(spark, 0, n))
        admin.create("resized", 4)
        producer = Producer(spark, root, "resized", "p")
        producer.send(records(spark, 0, n // 2))
        grow_started = time.perf_counter()
        TopicController(spark, root).alter("resized", 8)
        grow_s = time.perf_counter() - grow_started
        producer.send(records(spark, n // 2, n - n // 2))

        console.print("consuming the steady topic")
        steady_rate, _ = consume(spark, root, "steady", str(tmp / "sink-steady"), batch)
        console.print("consuming the resized topic")
        resized_rate, timed = consume(spark, root, "resized", str(tmp / "sink-resized"), batch)
        console.print("raw Delta: read the log, append to a plain table")
        started = time.perf_counter()
        admin.log("steady").table().write.format("delta").save(str(tmp / "raw"))
        raw_rate = n / (time.perf_counter() - started)

        gate = timed.gate
        [barrier] = gate.barriers(timed.log.snapshot().topic_version)
        thresholds = {p: gate.threshold(p, e) for p, e in barrier.before.items()}
        passed_at = first_new_at = None
        position = {p: 0 for p in range(8)}
        for at, ranges in timed.batches:
            if first_new_at is None and any(p >= 4 for p in ranges):
                first_new_at = at
            for p, (_s, end) in ranges.items():
                position[p] = end
            if passed_at is None and all(position[p] > t for p, t in thresholds.items()):
                passed_at = at
        start_delay = (first_new_at - passed_at) if passed_at and first_new_at else float("nan")

        sink = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", 0).load(str(tmp / "sink-resized"))
        from pyspark.sql import Window

        w = Window.partitionBy("key").orderBy("_commit_version", "partition", "offset")
        out_of_order = sink.withColumn("prev", F.lag("sequence").over(w)).where("prev > sequence").count()

        rows = [
            {"case": "raw Delta copy", "records_per_s": round(raw_rate), "vs_raw": 1.0},
            {"case": "steady (no resize)", "records_per_s": round(steady_rate), "vs_raw": round(steady_rate / raw_rate, 2)},
            {"case": "resized 4 -> 8, gated", "records_per_s": round(resized_rate), "vs_raw": round(resized_rate / raw_rate, 2)},
        ]
        emit(rows, False, f"{n:,} records, batches of {batch:,}")
        summary = {
            "gated_vs_steady": round(resized_rate / steady_rate, 2),
            "grow_4_to_8_s": round(grow_s, 2),
            "new_partition_start_after_thresholds_s": round(start_delay, 2),
            "batches": len(timed.batches),
            "out_of_order_keys": out_of_order,
        }
        Console().print(summary)
        print(json.dumps({"rows": rows, **summary}))
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
