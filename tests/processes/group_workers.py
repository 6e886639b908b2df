"""A consumer-group member as its own OS process, for the group tests and the benchmark.

Usage: group_workers.py ROOT TOPIC GROUP MEMBER_ID PROTOCOL ASSIGNOR SINK STOP_FILE [BATCH] [WARMUP]
Consumes TOPIC into the Delta SINK as a member of GROUP until STOP_FILE exists, then leaves.
Attaches to the test run's JVM (chaos.host) when $LAKELOG_CHAOS_GATEWAY is set.
Prints one JSON line per membership event and batch, with a wall-clock time, so a test can
watch it and a benchmark can time hand-overs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from chaos.host import session  # noqa: E402
from control_plane.group.listener import RebalanceListener  # noqa: E402
from control_plane.settings import GroupSettings  # noqa: E402
from pipelines.settings import ConsumerSettings  # noqa: E402
from pipelines.group_consumer import GroupConsumer  # noqa: E402


def say(event: str, **fields) -> None:
    print(json.dumps({"event": event, "t": time.time(), **fields}), flush=True)


class Printer(RebalanceListener):
    def on_partitions_assigned(self, partitions):
        say("assigned", partitions=[tp.partition for tp in partitions])

    def on_partitions_revoked(self, partitions):
        say("revoked", partitions=[tp.partition for tp in partitions])

    def on_partitions_lost(self, partitions):
        say("lost", partitions=[tp.partition for tp in partitions])

    def on_warmup_assigned(self, partitions):
        say("warmup", partitions=[tp.partition for tp in partitions])


def main(root, topic, group, member_id, protocol, assignor, sink, stop_file, batch="50", warmup="0") -> None:
    spark = session()  # the test run's JVM when it exported its gateway, else one of its own
    settings = GroupSettings(
        protocol=protocol, assignor=assignor, warmup=warmup == "1", warmup_max_lag=0,
        session_timeout_ms=int(os.environ.get("LAKELOG_TEST_SESSION_MS", "30000")),
        heartbeat_interval_ms=3000, rebalance_timeout_ms=60_000,
    )
    consumer = GroupConsumer(
        spark, root, topic, group, ConsumerSettings(max_records_per_batch=int(batch)), settings, member_id, Printer(),
    )
    say("started", member=member_id)
    result = consumer.run(
        sink_path=sink, stop=lambda: os.path.exists(stop_file), idle_timeout_s=1e9,
        on_batch=lambda ranges, n: say("batch", ranges={p: r for p, r in ranges.items()}, delivered=n),
    )
    say("done", **result.model_dump())


if __name__ == "__main__":
    main(*sys.argv[1:])
