"""Structured Streaming queries on format("lakelog") that the tests kill and restart, each in its
own OS process with its own JVM.

Usage: stream_workers.py read ROOT TOPIC SINK CHECKPOINT MAX_OFFSETS GROUP TRIGGER
           a stream from the topic into a Delta sink; TRIGGER: availableNow (stop when caught up)
           or a processing interval such as "0.5 seconds" (run until killed)
       stream_workers.py write ROOT TOPIC SOURCE CHECKPOINT
           a stream from a Delta table (one file per micro-batch) into the topic, availableNow
       stream_workers.py batch_write ROOT TOPIC PRODUCER_ID START N
           df.write of records START..START+N-1 (key, value; no sequence column) under PRODUCER_ID
Prints one JSON line per micro-batch Spark reports. A JVM of its own, or with
``LAKELOG_WORKER_ATTACH=1`` the test run's (workers.py): only for queries that are not killed,
since a killed process attached to a shared JVM leaves its query running there.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pipelines.spark import register  # noqa: E402
from tests.processes.workers import _session  # noqa: E402


def _watch(query) -> None:
    seen = -1
    while query.isActive:
        for p in query.recentProgress:
            if p["batchId"] > seen:
                seen = p["batchId"]
                print(json.dumps({"batch": seen, "rows": p["numInputRows"]}), flush=True)
        time.sleep(0.2)
    query.awaitTermination()


def read(root: str, topic: str, sink: str, checkpoint: str, max_offsets: str, group: str, trigger: str) -> None:
    spark = _session()
    register(spark, root)
    reader = (spark.readStream.format("lakelog").option("subscribe", topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", max_offsets))
    if group != "-":
        reader = reader.option("group", group)
    writer = reader.load().writeStream.format("delta").option("checkpointLocation", checkpoint)
    writer = writer.trigger(availableNow=True) if trigger == "availableNow" else writer.trigger(processingTime=trigger)
    _watch(writer.start(sink))


def write(root: str, topic: str, source: str, checkpoint: str) -> None:
    spark = _session()
    register(spark, root)
    query = (spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(source).select("key", "value")
             .writeStream.format("lakelog").option("topic", topic).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    _watch(query)


def batch_write(root: str, topic: str, producer_id: str, start: str, n: str) -> None:
    from tests.support import make_records

    spark = _session()
    register(spark, root)
    make_records(spark, int(n), keys=20, start=int(start)).select("key", "value").write.format("lakelog") \
        .option("topic", topic).option("producerId", producer_id).mode("append").save()
    print(json.dumps({"written": int(n)}), flush=True)


if __name__ == "__main__":
    {"read": read, "write": write, "batch_write": batch_write}[sys.argv[1]](*sys.argv[2:])
