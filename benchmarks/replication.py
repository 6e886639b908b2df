"""Replication benchmark: copying a topic to a follower root against a raw Delta copy of the same
rows, the time from a leader root's loss to a new leader accepting appends, and what ``acks: all``
costs a produce against ``acks: 1``, in one run on one machine.

- ``replicate``: ``lakelog replicate``'s round copying RECORDS records (8 partitions) from the leader
  root to a follower root, against ``spark.read.format("delta").load(leader).write.format("delta")
  .partitionBy("partition")`` of the same rows (the ratio is raw time / lakelog time: >= 0.8 is the aim);
- ``failover``: the leader root's log moved away (lost), then ``elect-leader`` to the in-sync
  follower and a producer built before the loss landing 100 records at the new leader;
- ``produce 100``: p50 of REPEATS produces of 100 keyed records with ``acks: 1`` and ``acks: all``
  (one in-sync follower), after warm-up.

Run: make bench-replication (or .venv/bin/python benchmarks/replication.py [RECORDS] [REPEATS]);
--json prints the figures as JSON.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))


def main(records: int = 1_000_000, repeats: int = 20, as_json: bool = False) -> dict:
    from pyspark.sql import functions as F

    from control_plane.replication.operations import Replication
    from control_plane.topics import TopicAdmin
    from log_store.config import SparkSettings
    from log_store.session import build_session
    from pipelines.producer import Producer
    from pipelines.settings import ProducerSettings

    spark = build_session(SparkSettings())
    work = Path(tempfile.mkdtemp(prefix="lakelog-bench-replication-"))
    eu, us = str(work / "eu"), str(work / "us")

    def rows(n: int, start: int = 0):
        return spark.range(start, start + n).select(
            F.concat(F.lit("k"), (F.col("id") % 10_000).cast("string")).alias("key"),
            F.sha2(F.col("id").cast("string"), 256).alias("value"), F.col("id").alias("sequence"))

    def progress(what: str) -> None:
        if not as_json:
            print(f"... {what}", file=sys.stderr, flush=True)

    TopicAdmin(spark, eu).create("bench", 8, replicas=[eu, us])
    progress(f"producing {records:,} records at the leader")
    Producer(spark, eu, "bench", "loader").send(rows(records), rows=records)
    replication = Replication(spark, eu)
    state = replication.state("bench")
    leader = replication.path(state, eu)

    progress("raw Delta copy of the same rows (warm-up, then timed)")
    spark.read.format("delta").load(leader).write.format("delta").partitionBy("partition").save(str(work / "warm"))
    started = time.perf_counter()
    spark.read.format("delta").load(leader).write.format("delta").partitionBy("partition").save(str(work / "raw"))
    raw_s = time.perf_counter() - started
    progress("lakelog replicate to the follower root")
    started = time.perf_counter()
    report = replication.replicate("bench")
    copy_s = time.perf_counter() - started
    assert report.followers[0].copied == records, report

    progress(f"{repeats} produces of 100 records, acks 1 and acks all")
    timings = {}
    for acks in ("1", "all"):
        producer = Producer(spark, eu, "bench", f"p-{acks}", ProducerSettings(acks=acks, min_insync_replicas=2))
        times = []
        for i in range(repeats + 3):
            started = time.perf_counter()
            producer.send(rows(100, records + 1_000 * i))
            if i >= 3:
                times.append(time.perf_counter() - started)
        timings[acks] = statistics.median(times)

    progress("failover: the leader's root lost, elect the follower, land 100 records there")
    survivor = Producer(spark, eu, "bench", "survivor")
    survivor.send(rows(100, 10_000_000))
    replication.replicate("bench")
    os.rename(leader, leader + ".lost")
    started = time.perf_counter()
    replication.elect("bench", us)
    elect_s = time.perf_counter() - started
    survivor.send(rows(100, 10_000_100))
    failover_s = time.perf_counter() - started

    figures = {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": platform.node(),
        "cores": os.cpu_count(), "load": os.getloadavg()[0], "records": records,
        "replicate_s": round(copy_s, 2), "raw_copy_s": round(raw_s, 2), "replicate_ratio": round(raw_s / copy_s, 2),
        "replicate_records_per_s": round(records / copy_s),
        "elect_s": round(elect_s, 2), "failover_to_first_append_s": round(failover_s, 2),
        "produce100_acks1_p50_ms": round(timings["1"] * 1000), "produce100_acksall_p50_ms": round(timings["all"] * 1000),
        "acks_all_cost": round(timings["all"] / timings["1"], 2),
    }
    if as_json:
        print(json.dumps(figures, indent=2))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"replication, {records:,} records, 8 partitions ({figures['date']}, load {figures['load']:.2f})")
        for col in ("case", "lakelog", "reference", "ratio"):
            table.add_column(col)
        table.add_row("copy to a follower root", f"{copy_s:.2f} s ({figures['replicate_records_per_s']:,} rec/s)",
                      f"{raw_s:.2f} s (read + partitioned write)", f"{figures['replicate_ratio']:.2f} (aim >= 0.8)")
        table.add_row("leader root lost -> new leader accepts an append", f"{failover_s:.2f} s (election {elect_s:.2f} s)",
                      "", "")
        table.add_row("produce 100 records, p50", f"acks all {figures['produce100_acksall_p50_ms']} ms",
                      f"acks 1 {figures['produce100_acks1_p50_ms']} ms", f"{figures['acks_all_cost']:.2f}x")
        Console().print(table)
    spark.stop()
    return figures


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--json"]
    main(int(args[0]) if args else 1_000_000, int(args[1]) if len(args) > 1 else 20, "--json" in sys.argv)
