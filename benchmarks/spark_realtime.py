"""End-to-end latency of a Spark Kafka query through ``lakelog serve``, beside a Kafka 4.4 broker.

    .venv/bin/python benchmarks/spark_realtime.py [--records 2000] [--rate 200] [--partitions 2]

One query, Spark's own Kafka connector at both ends (``readStream.format("kafka")`` from topic
``in``, ``writeStream.format("kafka")`` to topic ``out``), run against a Kafka broker and against
``lakelog serve`` (its own process and JVM, a fresh root), each in Spark's real-time mode
(``trigger(realTime=...)``, Spark 4.1 on) and in micro-batches (``processingTime="0 seconds"``).
A librdkafka producer sends ``--records`` records at ``--rate`` a second, each carrying the time
it was sent; a librdkafka consumer of ``out`` in the same process takes the time it got it back
(one process's monotonic clock: no clocks of two processes compared). Prints p50 / p99 / max of
each, and the ratios lakelog serve / Kafka; figures, machine and load go to ``--json-out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.kafka_broker import Broker  # noqa: E402
from benchmarks.serve import LakelogServer  # noqa: E402

MODES = {"real-time": {"realTime": "5 minutes"}, "micro-batch": {"processingTime": "0 seconds"}}


def create(bootstrap: str, topics: list[str], partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for topic, future in admin.create_topics([NewTopic(t, partitions, 1) for t in topics]).items():
        future.result(120)


def latencies(spark, bootstrap: str, mode: str, records: int, rate: int, partitions: int) -> dict:
    """Start the query, feed ``in`` at a steady rate, time each record's return on ``out``."""
    from confluent_kafka import Consumer, Producer

    tag = uuid.uuid4().hex[:6]
    source, sink = f"in-{tag}", f"out-{tag}"
    create(bootstrap, [source, sink], partitions)
    checkpoint = tempfile.mkdtemp(prefix="lakelog-rt-ckpt-")
    query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", source).option("startingOffsets", "latest").load()
             .selectExpr("key", "value")
             .writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", sink)
             .option("checkpointLocation", checkpoint).outputMode("update").trigger(**MODES[mode]).start())
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rt-{tag}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([sink])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "enable.idempotence": True})
    try:
        # warm-up: records until one comes back, so the query's start is not measured
        deadline = time.monotonic() + 180
        back = None
        while back is None:
            if time.monotonic() > deadline or query.exception() is not None:
                raise RuntimeError(f"{mode}: the query returned nothing within 180 s: {query.exception()}")
            producer.produce(source, key=b"warm", value=b"warm")
            producer.flush(10)
            back = consumer.poll(2.0)
        while consumer.poll(1.0) is not None:
            pass
        seen: list[float] = []
        done = threading.Event()

        def collect() -> None:
            while len(seen) < records and not done.is_set():
                msg = consumer.poll(0.5)
                if msg is None or msg.error() or msg.key() == b"warm":
                    continue
                seen.append((time.monotonic_ns() - int(msg.value())) / 1e6)

        reader = threading.Thread(target=collect)
        reader.start()
        gap = 1.0 / rate
        start = time.monotonic()
        for i in range(records):
            wait = start + i * gap - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            producer.produce(source, key=b"k%03d" % (i % 100), value=str(time.monotonic_ns()).encode())
            producer.poll(0)
        producer.flush(60)
        reader.join(120)
        done.set()
        reader.join()
        if len(seen) < records:
            raise RuntimeError(f"{mode}: {len(seen)} of {records} records came back within 120 s")
        seen.sort()
        return {"records": records, "rate": rate, "p50_ms": statistics.median(seen),
                "p99_ms": seen[int(len(seen) * 0.99) - 1], "max_ms": seen[-1]}
    finally:
        query.stop()
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--rate", type=int, default=200, help="records a second")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--json-out", default=None)
    args = parser.parse_args()

    from log_store.config import SparkSettings
    from log_store.session import build_session

    # real-time mode runs every source partition's task and the sink's at once: a slot each
    spark = build_session(SparkSettings(master=f"local[{max(2, args.partitions)}]"))
    # stopping a real-time query interrupts its long-running tasks, which Spark logs as errors;
    # a failed query is raised from query.exception() instead
    spark.sparkContext.setLogLevel("FATAL")
    out = Path(args.json_out or HERE / "out" / f"spark-realtime-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.node(),
              "cpus": os.cpu_count(), "load_at_start": os.getloadavg()[0], "args": vars(args), "runs": {}}
    sides = [("kafka", Broker), ("lakelog", LakelogServer)]
    for side, make in sides:
        server = make()
        if side == "kafka":
            server.start()
        try:
            for mode in MODES:
                found = latencies(spark, server.bootstrap, mode, args.records, args.rate, args.partitions)
                result["runs"][f"{side} {mode}"] = found
                print(f"{side:8} {mode:12} p50 {found['p50_ms']:8.1f} ms  p99 {found['p99_ms']:8.1f} ms  "
                      f"max {found['max_ms']:8.1f} ms", flush=True)
                out.write_text(json.dumps(result, indent=2))
        finally:
            server.stop()
    result["load_at_end"] = os.getloadavg()[0]
    out.write_text(json.dumps(result, indent=2))
    print(f"{'mode':12} {'kafka p50/p99 ms':>20} {'lakelog p50/p99 ms':>20} {'ratio p50/p99':>16}")
    for mode in MODES:
        k, l = result["runs"][f"kafka {mode}"], result["runs"][f"lakelog {mode}"]
        print(f"{mode:12} {k['p50_ms']:9.1f}/{k['p99_ms']:<9.1f} {l['p50_ms']:9.1f}/{l['p99_ms']:<9.1f} "
              f"{l['p50_ms'] / k['p50_ms']:7.2f}/{l['p99_ms'] / k['p99_ms']:<7.2f}")
    print(f"figures: {out}")


if __name__ == "__main__":
    main()
