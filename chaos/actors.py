"""The processes a campaign schedule starts, kills and restarts: ``python -m chaos.actors KIND JSON``.

Each actor is one OS process using lakelog's public API, as a user's job would. It prints one JSON
line per event (``{"event": ...}``) so the runner can follow it; a lakelog error ends it with
exit code 1 and an ``error`` line. Kinds:

- ``create``: create the topic.
- ``produce``: send an input file with a producer id; after each batch, append the batch's
  sequence range to ``ack_file`` (what the producer has been told is committed).
- ``alter`` / ``tick``: one controller command (partition deletion enabled); likewise the upkeep
  steps ``delete_records``, ``compact`` (files), ``compact_keys`` (Kafka's log cleaning), ``retention``.
- ``member``: one consumer-group member consuming into the group's Delta sink until ``stop_file``
  exists; ``lag_s`` sleeps after each batch (a slow consumer).
- ``stream_read``: a Structured Streaming query reading the topic into a Delta sink, run again and
  again until ``stop_file`` exists (on a Spark Connect session when ``remote`` names a server).
- ``txn_copy``: read-process-write: the group ``group`` reads the topic (read_committed) and writes
  each record to each of ``outputs`` with the group's positions, one transaction per ``batch``
  records, under ``transactional_id``, until caught up (with ``stop_file``: until it exists);
  ``abort_every``: every n-th transaction aborted on purpose. ``txn_tick`` / ``txn_abort``: the
  coordinator's tick, `transactions abort` of an id.
- ``member`` takes ``isolation_level`` (read_committed: a transactional topic's reader).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import traceback
from pathlib import Path


def say(event: str, **fields) -> None:
    print(json.dumps({**fields, "event": event, "at": round(time.time(), 3)}, default=str), flush=True)


def create(spark, a: dict) -> None:
    from control_plane.topics import TopicAdmin

    record = TopicAdmin(spark, a["root"]).create(a["topic"], a["partitions"], replicas=a.get("replicas"))
    if a.get("configs"):  # as `topics create --config` does: a re-run after a crash sets them
        _controller(spark, a).alter_config(a["topic"], a["configs"])
    say("created", partitions=record.partition_count)


def replicate(spark, a: dict) -> None:
    from control_plane.replication.operations import Replication

    report = Replication(spark, a["root"]).replicate(a["topic"])
    say("replicated", copied={f.root: f.copied for f in report.followers}, in_sync=report.in_sync)


def diverge(spark, a: dict) -> None:
    """Append records straight to the topic's log at ``at`` (a leader that is about to be cut off):
    records no follower has, under a producer id no check counts."""
    from pyspark.sql import functions as F

    from log_store.topic_log import TopicLog

    log = TopicLog(spark, f"{a['at']}/topics/{a['topic']}")
    count = log.metadata().undeleted_partition_count
    rows = spark.range(a["records"]).select(
        (F.col("id") % count).cast("int").alias("partition"), F.col("id").cast("string").cast("binary").alias("key"),
        F.lit(b"diverged").alias("value"), F.lit(None).cast("array<struct<key:string,value:binary>>").alias("headers"),
        F.current_timestamp().alias("timestamp"), F.lit("zombie").alias("producer_id"), F.col("id").alias("sequence"))
    say("diverged", appended=log.append(rows, count, "zombie").appended)


def elect(spark, a: dict) -> None:
    from control_plane.replication.operations import Replication

    replication = Replication(spark, a["root"])
    leader = a["leader"]
    if leader == "next":  # the first in-sync root after the leader (none: the election is refused)
        state = replication.finish(a["topic"])
        order = state.replicas[state.replicas.index(state.leader) + 1:] + state.replicas
        leader = next((r for r in order if r in state.in_sync and r != state.leader), order[0])
    elif leader == "current":  # the leader again: un-fences it after an election that did not elect
        leader = replication.finish(a["topic"]).leader
    state = replication.elect(a["topic"], leader, unclean=a.get("unclean", False))
    say("elected", leader=state.leader, leader_epoch=state.leader_epoch)


def produce(spark, a: dict) -> None:
    from pipelines.settings import ProducerSettings
    from pipelines.inputs import read_input
    from pipelines.producer import Producer
    from pyspark.sql import functions as F

    batch = a["batch"]
    settings = ProducerSettings(batch_size=batch, max_retries=200, acks=a.get("acks", "1"))
    producer = Producer(spark, a["root"], a["topic"], a["producer_id"], settings)
    records = read_input(spark, a["input"])

    def acked(done: int, total: int) -> None:
        lo, hi = (done - 1) * batch, min(done * batch, a["records"])
        with open(a["ack_file"], "a") as fh:
            fh.write(json.dumps({"lo": lo, "hi": hi}) + "\n")
        say("batch", lo=lo, hi=hi, of=total)

    if _sends_each_batch(a["producer_id"]):
        # Odd producers send batch by batch, as a loop of small produces does: rows the plan
        # bounds (a limit), so each send counts its rows as it writes them (one Spark job).
        n = (a["records"] + batch - 1) // batch
        results = []
        for b in range(n):
            part = records.where((F.col("sequence") >= b * batch) & (F.col("sequence") < (b + 1) * batch)).limit(batch)
            results.append(producer.send(part, 0))
            acked(b + 1, n)
    else:
        results = [producer.send(records, 0, acked)]
    say("produced", appended=sum(r.appended for r in results), duplicates=sum(r.duplicates for r in results),
        refreshes=sum(r.metadata_refreshes for r in results))


def _sends_each_batch(producer_id: str) -> bool:
    """p1, p3, ...: one send per batch (rows the plan bounds); p0, p2, ...: one send of the file."""
    number = producer_id[1:]
    return producer_id.startswith("p") and number.isdigit() and int(number) % 2 == 1


def _controller(spark, a: dict):
    from control_plane.controller import TopicController
    from control_plane.settings import ControllerSettings

    return TopicController(spark, a["root"], ControllerSettings(delete_partition_enable=True))


def alter(spark, a: dict) -> None:
    result = _controller(spark, a).alter(a["topic"], a["partitions"])
    say("altered", result=result.model_dump(mode="json"))


def tick(spark, a: dict) -> None:
    for result in _controller(spark, a).tick(a["topic"], a["delay"]):
        say("ticked", result=result.model_dump(mode="json"))


def delete_records(spark, a: dict) -> None:
    """Delete one partition's records below a fraction of its log end, as read now."""
    from control_plane.topics import TopicAdmin

    snap = TopicAdmin(spark, a["root"]).log(a["topic"]).snapshot()
    readable = snap.readable()
    p = readable[a["pick"] % len(readable)]
    before = snap.first_offset(p) + int((snap.log_ends[p] - snap.first_offset(p)) * a["fraction"])
    changes = _controller(spark, a).delete_records(a["topic"], {p: before})
    say("deleted_records", partition=p, before=before, changes=[c.model_dump() for c in changes])


def compact(spark, a: dict) -> None:
    results = _controller(spark, a).compact(a["topic"])
    say("compacted", results=[r.model_dump() for r in results])


def compact_keys(spark, a: dict) -> None:
    """Key compaction of a compacted topic (`lakelog topics compact --keys`)."""
    results = _controller(spark, a).compact_keys(a["topic"])
    say("cleaned", results=[r.model_dump() for r in results])


def retention(spark, a: dict) -> None:
    """A size retention applied by one tick, then lifted (later ticks keep what is left)."""
    ctl = _controller(spark, a)
    ctl.alter_config(a["topic"], [f"retention.bytes={a['bytes']}"])
    try:
        for result in ctl.tick(a["topic"], 3600.0):
            say("ticked", result=result.model_dump(mode="json"))
    finally:
        ctl.alter_config(a["topic"], [], ["retention.bytes"])


def layout(spark, a: dict) -> None:
    moved = _controller(spark, a).change_layout(a["topic"], a["layout"])
    say("layout", result=moved.model_dump())


def delete(spark, a: dict) -> None:
    result = _controller(spark, a).delete(a["topic"])
    say("deleted", topic_version=result.topic_version)


def member(spark, a: dict) -> None:
    from control_plane.group.listener import RebalanceListener
    from control_plane.settings import GroupSettings
    from pipelines.settings import ConsumerSettings
    from pipelines.group_consumer import GroupConsumer

    class Listener(RebalanceListener):
        def on_partitions_assigned(self, partitions):
            say("assigned", partitions=[tp.partition for tp in partitions])

        def on_partitions_revoked(self, partitions):
            say("revoked", partitions=[tp.partition for tp in partitions])

        def on_partitions_lost(self, partitions):
            say("lost", partitions=[tp.partition for tp in partitions])

    settings = GroupSettings(protocol=a["protocol"], assignor=a["assignor"], session_timeout_ms=a["session_ms"],
                             heartbeat_interval_ms=a["heartbeat_ms"], rebalance_timeout_ms=a["session_ms"] * 3)
    consumer = GroupConsumer(spark, a["root"], a["topic"], a["group"], ConsumerSettings(
        max_records_per_batch=a["batch"], isolation_level=a.get("isolation_level", "read_uncommitted")),
                             settings, a["member_id"], Listener())
    stop = Path(a["stop_file"])

    def on_batch(ranges, delivered) -> None:
        say("delivered", ranges={p: r for p, r in ranges.items()}, total=delivered)
        if a.get("lag_s"):
            time.sleep(a["lag_s"])

    say("started", member=a["member_id"])
    result = consumer.run(sink_path=a["sink"], stop=stop.exists, idle_timeout_s=a.get("idle_s", 1e9), on_batch=on_batch)
    say("left", result=result.model_dump(mode="json"))


def stream_write(spark, a: dict) -> None:
    """A Structured Streaming query writing ``input`` (JSON lines of key and value) to the topic
    through format("lakelog"), one Delta file of ``batch`` rows per micro-batch (Trigger.AvailableNow),
    under ``producer_id`` if given; once it has run to its end, all of it is acknowledged in
    ``ack_file`` if given. Runs in a JVM of its own: the crash point is in the query's Python
    worker, which a JVM starts, and a kill is the driver's crash."""
    from delta.tables import DeltaTable

    from pipelines.spark import register

    register(spark, a["root"])
    source = a["source"]
    rows = spark.read.json(a["input"]).select("key", "value").collect()
    # a run killed while it wrote the source left a prefix of it (each batch one commit)
    written = spark.read.format("delta").load(source).count() if DeltaTable.isDeltaTable(spark, source) else 0
    for lo in range(written, len(rows), a["batch"]):
        spark.createDataFrame(rows[lo:lo + a["batch"]], "key string, value string").coalesce(1) \
            .write.format("delta").mode("append").save(source)
    writer = (spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(source)
              .writeStream.format("lakelog").option("topic", a["topic"]).option("checkpointLocation", a["checkpoint"]))
    if a.get("producer_id"):
        writer = writer.option("producerId", a["producer_id"])
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    if a.get("ack_file"):  # the query wrote all of its input: every record is acknowledged
        with open(a["ack_file"], "a") as fh:
            fh.write(json.dumps({"lo": 0, "hi": len(rows)}) + "\n")
    say("streamed", batches=len(query.recentProgress))


def stream_read(spark, a: dict) -> None:
    """A stream reading the topic through format("lakelog") with the ``group`` option into a Delta
    sink (change data feed on, for the checker), under Trigger.AvailableNow, ``max_offsets`` records
    a micro-batch at most: one run after another from its checkpoint, until ``stop_file`` exists.
    On a classic session the JVM source serves it, on a Connect session the Python data source.
    A run that failed reading a batch whose files' root was lost after its plan fails with lakelog's
    error saying so (``reading.read_lost``); the runner starts it again, as the error says to."""
    from log_store.session import is_connect
    from pipelines.spark import python_source, register
    from pipelines.spark.reading import read_lost

    if is_connect(spark):
        python_source.register(spark, a["root"])
    else:
        register(spark, a["root"])
    spark.conf.set("spark.databricks.delta.properties.defaults.enableChangeDataFeed", "true")
    stop = Path(a["stop_file"])
    while not stop.exists():
        query = (spark.readStream.format("lakelog").option("subscribe", a["topic"]).option("group", a["group"])
                 .option("startingOffsets", "earliest").option("failOnDataLoss", "false")
                 .option("maxOffsetsPerTrigger", a["max_offsets"]).load()
                 .writeStream.format("delta").option("checkpointLocation", a["checkpoint"])
                 .trigger(availableNow=True).start(a["sink"]))
        try:
            query.awaitTermination()
        except Exception as exc:
            lost = read_lost(exc)
            if lost is None:
                raise
            raise lost
        progress = [p if isinstance(p, dict) else json.loads(p.json) for p in query.recentProgress]
        say("ran", batches=len(progress), records=sum(p.get("numInputRows") or 0 for p in progress))
        time.sleep(a["pause_s"])


def txn_copy(spark, a: dict) -> None:
    import pyarrow as pa

    from pipelines.consumer import ArrowHandler, Consumer
    from pipelines.driver_batches import HEADERS
    from pipelines.producer import Producer
    from pipelines.settings import ConsumerSettings

    outputs = a["outputs"]
    producer = Producer(spark, a["root"], outputs[0])
    consumer = Consumer(spark, a["root"], a["topic"], a["group"], ConsumerSettings(isolation_level="read_committed"))
    stop = Path(a["stop_file"]) if a.get("stop_file") else None
    every, n = a.get("abort_every", 0), 0
    while True:
        # The positions are read inside the transaction, after InitProducerId finished or aborted
        # what an earlier instance of the id left: a decided commit's positions are the group's by then.
        with producer.transaction(transactional_id=a["transactional_id"]) as txn:
            taken: list[dict] = []
            snap = consumer.snapshot()
            ranges = consumer.deliver(consumer.positions(snap=snap), a["batch"], handler=ArrowHandler(
                lambda rows, _r: taken.extend(rows.to_pylist())), snap=snap)
            if ranges:
                # each copy names its input record (header ``src``: partition:offset), for the checker
                src = [[{"key": "src", "value": f"{r['partition']}:{r['offset']}".encode()}] for r in taken]
                for i, topic in enumerate(outputs):
                    values = [None if r["value"] is None else r["value"] + f"-{i}".encode() for r in taken]
                    txn.send(pa.table({"key": pa.array([r["key"] for r in taken], pa.binary()),
                                       "value": pa.array(values, pa.binary()), "headers": pa.array(src, HEADERS)}),
                             topic=topic)
                txn.send_offsets(a["group"], {a["topic"]: {p: end for p, (_s, end) in ranges.items()}})
                n += 1
                if every and n % every == 0:
                    txn.abort()  # on purpose: nothing of it may reach a read_committed reader
                    say("aborted", records=len(taken))
                    continue
        if not ranges:
            if stop is None or stop.exists():
                return
            time.sleep(0.5)
            continue
        say("copied", records=len(taken), topic_version=snap.topic_version)  # the checker: where its view starts


def txn_tick(spark, a: dict) -> None:
    """The transactions' part of `lakelog controller tick`: finish decided transactions."""
    from control_plane.transactions.coordinator import TransactionCoordinator

    moved = TransactionCoordinator(spark, a["root"]).tick()
    say("txn_ticked", moved=[(r.transactional_id, r.state.value) for r in moved])


def txn_abort(spark, a: dict) -> None:
    """`lakelog transactions abort` of a transactional id: nothing open is no failure here."""
    from control_plane.transactions.coordinator import TransactionCoordinator
    from control_plane.transactions.state import InvalidTransactionStateError, UnknownTransactionalIdError

    try:
        row = TransactionCoordinator(spark, a["root"]).abort(a["transactional_id"])
    except (InvalidTransactionStateError, UnknownTransactionalIdError) as exc:  # nothing open, or not yet
        say("txn_abort_noop", message=str(exc))
        return
    say("txn_aborted", state=row.state.value)


ACTORS = {"layout": layout, "create": create, "replicate": replicate, "elect": elect, "diverge": diverge, "produce": produce, "alter": alter, "tick": tick, "delete": delete, "member": member,
          "stream_write": stream_write, "stream_read": stream_read, "delete_records": delete_records, "compact": compact, "retention": retention,
          "compact_keys": compact_keys, "txn_copy": txn_copy, "txn_tick": txn_tick, "txn_abort": txn_abort}


def main() -> int:
    from chaos.host import session
    from log_store.errors import LakelogError

    kind, args = sys.argv[1], json.loads(sys.argv[2])
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("lakelog.gating").setLevel(logging.DEBUG)  # evidence for a failing schedule
    logging.getLogger("lakelog.group").setLevel(logging.INFO)
    spark = session(own_jvm=bool(args.get("own_jvm")), remote=args.get("remote"))
    say("ready", kind=kind, pid=os.getpid(), tz=os.environ.get("TZ", ""))
    try:
        ACTORS[kind](spark, args)
    except LakelogError as exc:
        traceback.print_exc()  # to the actor's .err log: where it failed, for a failing schedule
        say("error", error=type(exc).__name__, message=str(exc))
        return 1
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())
