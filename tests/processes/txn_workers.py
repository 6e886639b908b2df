"""A read-process-write worker the transaction tests kill: a group member of one reading topic
``in`` (read_committed) that writes each record to ``out1`` and ``out2`` with its group's
positions, all in one transaction per batch, until it has caught up. Run with
``LAKELOG_NO_JVM=1``: delta-rs only.

Usage: txn_workers.py ROOT TRANSACTIONAL_ID GROUP BATCH
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from log_store.session import LazySession  # noqa: E402
from pipelines.consumer import ArrowHandler, Consumer  # noqa: E402
from pipelines.producer import Producer  # noqa: E402
from pipelines.settings import ConsumerSettings  # noqa: E402


def copy(root: str, transactional_id: str, group: str, batch: str) -> None:
    spark = LazySession(lambda: sys.exit("a JVM was started"))
    producer = Producer(spark, root, "out1")
    consumer = Consumer(spark, root, "in", group, ConsumerSettings(isolation_level="read_committed"))
    while True:
        # The positions are read inside the transaction, after InitProducerId finished or aborted
        # what an earlier instance of the id left: a decided commit's positions are the group's by then.
        with producer.transaction(transactional_id=transactional_id) as txn:
            taken: list[dict] = []
            ranges = consumer.deliver(consumer.positions(), int(batch), handler=ArrowHandler(
                lambda rows, _r: taken.extend(rows.to_pylist())))
            if not ranges:
                return
            for topic, suffix in (("out1", "-1"), ("out2", "-2")):
                txn.send([{"key": r["key"], "value": r["value"] + suffix.encode()} for r in taken], topic=topic)
            txn.send_offsets(group, {"in": {p: end for p, (_s, end) in ranges.items()}})
        print(f"committed {len(taken)}", flush=True)


if __name__ == "__main__":
    copy(*sys.argv[1:])
