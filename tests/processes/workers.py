"""Processes the tests race and kill. Each builds its own Spark session in its own JVM, unless
started with ``LAKELOG_WORKER_ATTACH=1``: then it attaches to the test run's JVM (chaos.host),
for tests where the other party's being another OS process is enough (no cross-JVM race, no
kill: a killed process attached to a shared JVM would leave its JVM-side call running).

Usage: workers.py append ROOT TOPIC PRODUCER_ID START N BATCH_SIZE [KEYS] [KEY_PREFIX]
       workers.py alter_count ROOT TOPIC NEW_COUNT
       workers.py compact ROOT TOPIC STOP_FILE SEGMENT_BYTES
       workers.py replicate ROOT TOPIC
       workers.py change_layout ROOT TOPIC LAYOUT
Prints one JSON line per committed batch so a test can watch progress.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from log_store.config import SparkSettings  # noqa: E402

from pipelines.settings import ProducerSettings  # noqa: E402
from log_store.session import build_session  # noqa: E402


ATTACH_ENV = "LAKELOG_WORKER_ATTACH"


def _session():
    if os.environ.get(ATTACH_ENV) == "1":
        from chaos.host import attach

        return attach()
    return build_session(SparkSettings(profile="small"))


def send_batches(spark, root: str, topic: str, producer_id: str, start: int, n: int, batch: int, keys: int = 10,
                 prefix: str = "k") -> Iterator[dict]:
    """Produce records start..start+n-1 in batches of ``batch``; one summary per committed batch."""
    from pyspark.sql import functions as F

    from pipelines.producer import Producer

    producer = Producer(spark, root, topic, producer_id, ProducerSettings(batch_size=batch, max_retries=100))
    for lo in range(start, start + n, batch):
        hi = min(lo + batch, start + n)
        df = spark.range(lo, hi).select(
            F.concat(F.lit(prefix), (F.col("id") % keys).cast("string")).alias("key"),
            F.col("id").cast("string").alias("value"),
            F.col("id").alias("sequence"),
        )
        result = producer.send(df)
        yield {"lo": lo, "hi": hi, "appended": result.appended, "duplicates": result.duplicates,
               "refreshes": result.metadata_refreshes, "retries": result.commit_retries}


def append(root: str, topic: str, producer_id: str, start: str, n: str, batch: str, keys: str = "10",
           prefix: str = "k") -> None:
    spark = _session()
    for line in send_batches(spark, root, topic, producer_id, int(start), int(n), int(batch), int(keys), prefix):
        print(json.dumps(line), flush=True)


def set_count(spark, root: str, topic: str, n: int) -> None:
    """Expand the partition count in the log table's metadata (the controller's commit)."""
    from control_plane.topics import TopicAdmin
    from log_store.log_metadata import PartitionMetadata

    log = TopicAdmin(spark, root).log(topic)
    meta = log.metadata()
    parts = {p: PartitionMetadata(partition=p, leader_epoch=m.leader_epoch + 1) for p, m in meta.partitions.items()}
    parts.update({p: PartitionMetadata(partition=p) for p in range(len(parts), n)})
    log.set_metadata(meta.model_copy(update={"undeleted_partition_count": n, "partitions": parts}))


def alter_count(root: str, topic: str, new_count: str) -> None:
    set_count(_session(), root, topic, int(new_count))
    print(json.dumps({"count": int(new_count)}), flush=True)


def compact(root: str, topic: str, stop_file: str, segment_bytes: str) -> None:
    """Compact ``topic`` over and over until ``stop_file`` exists; one JSON line per merge."""
    from control_plane.controller import TopicController

    ctl = TopicController(_session(), root)
    ctl.alter_config(topic, [f"segment.bytes={segment_bytes}"])
    while True:
        stop = Path(stop_file).exists()  # one last round after the producers finished
        for c in ctl.compact(topic):
            print(json.dumps(c.model_dump()), flush=True)
        if stop:
            return
        time.sleep(0.5)


def replicate(root: str, topic: str) -> None:
    """One replication round of ``topic`` (a copier another process races)."""
    from control_plane.replication.operations import Replication

    report = Replication(_session(), root).replicate(topic)
    print(json.dumps({"copied": [f.copied for f in report.followers], "errors": [f.error for f in report.followers]}),
          flush=True)


def change_layout(root: str, topic: str, layout: str) -> None:
    """Move ``topic``'s log to ``layout`` (racing appends of other processes)."""
    from control_plane.controller import TopicController

    print(json.dumps(TopicController(_session(), root).change_layout(topic, layout).model_dump()), flush=True)


if __name__ == "__main__":
    {"append": append, "alter_count": alter_count, "compact": compact, "replicate": replicate,
     "change_layout": change_layout}[sys.argv[1]](*sys.argv[2:])
