"""Processes the tests race and kill. Each builds its own Spark session (its own JVM).

Usage: workers.py append ROOT TOPIC PRODUCER_ID START N BATCH_SIZE [KEYS] [KEY_PREFIX]
       workers.py alter_count ROOT TOPIC NEW_COUNT
Prints one JSON line per committed batch so a test can watch progress.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from log_store.config import SparkSettings  # noqa: E402

from pipelines.settings import ProducerSettings  # noqa: E402
from log_store.session import build_session  # noqa: E402


def append(root: str, topic: str, producer_id: str, start: str, n: str, batch: str, keys: str = "10",
           prefix: str = "k") -> None:
    from pyspark.sql import functions as F

    from pipelines.producer import Producer

    spark = build_session(SparkSettings(profile="small"))
    producer = Producer(spark, root, topic, producer_id, ProducerSettings(batch_size=int(batch), max_retries=100))
    s, total, b = int(start), int(n), int(batch)
    for lo in range(s, s + total, b):
        hi = min(lo + b, s + total)
        df = spark.range(lo, hi).select(
            F.concat(F.lit(prefix), (F.col("id") % int(keys)).cast("string")).alias("key"),
            F.col("id").cast("string").alias("value"),
            F.col("id").alias("sequence"),
        )
        result = producer.send(df)
        print(json.dumps({"lo": lo, "hi": hi, "appended": result.appended, "duplicates": result.duplicates,
                          "refreshes": result.metadata_refreshes, "retries": result.commit_retries}), flush=True)


def alter_count(root: str, topic: str, new_count: str) -> None:
    """Expand the partition count in the log table's metadata (the controller's commit)."""
    from control_plane.topics import TopicAdmin
    from log_store.topic_log import PartitionMetadata

    spark = build_session(SparkSettings(profile="small"))
    log = TopicAdmin(spark, root).log(topic)
    meta = log.metadata()
    n = int(new_count)
    parts = {p: PartitionMetadata(partition=p, leader_epoch=m.leader_epoch + 1) for p, m in meta.partitions.items()}
    parts.update({p: PartitionMetadata(partition=p) for p in range(len(parts), n)})
    log.set_metadata(meta.model_copy(update={"undeleted_partition_count": n, "partitions": parts}))
    print(json.dumps({"count": n}), flush=True)


if __name__ == "__main__":
    {"append": append, "alter_count": alter_count}[sys.argv[1]](*sys.argv[2:])
