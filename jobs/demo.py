"""``lakelog demo``: the whole story on the local root, printed as tables.

Produce keyed records, consume some with a group member, grow the topic 4 -> 6, produce, shrink
it 6 -> 5 (the demo turns the deletion switch on for itself), produce, consume the rest (the
gates keep every key in order), retire the drained partition, read the topic into a Delta table
with a Structured Streaming query (format("lakelog")), audit the order of both with
great-expectations, draw the topic's timeline, and read the resize history back with SQL.
Each run uses a fresh topic and group, so the demo can be re-run on the same root.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timezone

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from control_plane.controller import TopicController
from control_plane.group.describe import describe_group
from control_plane.group.store import GroupTables
from control_plane.layout import RootLayout
from control_plane.tables import ControlTables
from control_plane.topics import TopicAdmin
from jobs.output import emit, stderr
from control_plane.settings import ControllerSettings
from jobs.config import LakelogConfig
from pipelines.audit import run_audit
from pipelines.group_consumer import GroupConsumer
from pipelines.producer import Producer
from pipelines.timeline import write_timeline

DEMO_GROUP = "demo-group"


def _orders(spark: SparkSession, start: int, n: int) -> DataFrame:
    return spark.range(start, start + n).select(
        F.concat(F.lit("customer-"), (F.col("id") % 50).cast("string")).alias("key"),
        F.to_json(F.struct(F.col("id").alias("order"), (F.col("id") * 7 % 100).alias("amount"))).alias("value"),
        F.col("id").alias("sequence"),
    )


def _stream(spark: SparkSession, root: str, topic: str, table: str, checkpoint: str) -> list[int]:
    """Read the whole topic into a Delta table with Spark's own streaming API; records per micro-batch."""
    from pipelines.spark import register

    register(spark, root)
    query = (spark.readStream.format("lakelog").option("subscribe", topic).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", 2000).load()
             .writeStream.format("delta").option("checkpointLocation", checkpoint).trigger(availableNow=True).start(table))
    query.awaitTermination()
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def run_demo(spark: SparkSession, root: str, config: LakelogConfig, as_json: bool = False) -> dict:
    """Run the story on a new topic under ``root``; return what happened (also printed)."""
    layout = RootLayout(root)
    # the time for people, a random tail so two demos started in one second on one root do not collide
    topic = f"demo-orders-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
    sink = f"{layout.root}/sinks/{topic}"
    admin = TopicAdmin(spark, root)
    controller = TopicController(spark, root, ControllerSettings(delete_partition_enable=True, delete_delay_seconds=0))
    steps: list[dict] = []

    def step(what: str, **facts) -> None:
        steps.append({"step": len(steps) + 1, "what": what, "details": ", ".join(f"{k}={v}" for k, v in facts.items())})
        stderr.print(f"{len(steps)}. {what}")

    def consume(max_records: int | None) -> int:
        member = GroupConsumer(spark, root, topic, DEMO_GROUP, config.consumer, config.group)
        return member.run(sink_path=sink, max_records=max_records).records

    admin.create(topic, 4)
    step("created topic", topic=topic, partitions=4)
    producer = Producer(spark, root, topic, "demo-feed", config.producer, config.replication)
    step("produced 2,000 keyed orders (50 customers)", records=producer.send(_orders(spark, 0, 2000)).appended)
    step("a group member consumed 1,000 of them exactly once into the sink", records=consume(1000), sink=sink)
    grown = controller.alter(topic, 6)
    step("grew the topic 4 -> 6 (epochs bumped, new partitions gated)", topic_version=grown.topic_version)
    step("produced 1,000 more", records=producer.send(_orders(spark, 2000, 1000)).appended)
    shrunk = controller.alter(topic, 5)
    step("shrank it 6 -> 5: partition 5 marked for deletion, ReadOnly", topic_version=shrunk.topic_version)
    step("produced 1,000 more", records=producer.send(_orders(spark, 3000, 1000)).appended)
    step("the group consumed the rest, behind the resize gates", records=consume(None))
    table = f"{layout.root}/streams/{topic}"
    batches = _stream(spark, root, topic, table, f"{layout.root}/checkpoints/{topic}")
    step("a Structured Streaming query (format('lakelog'), availableNow) read the topic into a Delta table",
         micro_batches=len(batches), records=sum(batches), table=table)
    ticks = controller.tick(topic, delete_delay=0)
    step("controller tick retired the drained marked partition", retired=ticks[0].retired if ticks else [])
    report = run_audit(spark, root, topic, sink)
    step("ordering audit (great-expectations) of the group's sink", passed=report.passed, report=report.report_path)
    streamed = run_audit(spark, root, topic, table)
    step("ordering audit of the stream's table", passed=streamed.passed, report=streamed.report_path)
    picture, _events = write_timeline(spark, root, topic)
    step("drew the topic's timeline", picture=picture)

    ControlTables(spark, layout).register_views()
    history = spark.sql(
        "SELECT topic_version, event, partition_count, undeleted_partition_count, "
        "transform(partitions, p -> concat(p.partition, ':', p.mode, '@', p.leader_epoch)) AS partitions "
        f"FROM topic_history WHERE topic = '{topic}' ORDER BY topic_version"
    ).collect()
    result = {
        "root": layout.root, "topic": topic, "steps": steps,
        "checks": [{"check": c.name, "passed": c.passed, "violations": c.violations} for c in report.checks]
        + [{"check": f"stream table: {c.name}", "passed": c.passed, "violations": c.violations}
           for c in streamed.checks if c.name.startswith("sink")],
        "group": describe_group(GroupTables(spark, root), DEMO_GROUP).model_dump(mode="json"),
        "history": [{**r.asDict(), "partitions": " ".join(r["partitions"])} for r in history],
    }
    if as_json:
        emit(result, True)
        return result
    emit(steps, False, f"the story of {topic}")
    emit(result["checks"], False, f"audit: {'PASSED' if report.passed and streamed.passed else 'FAILED'} "
                                  f"({report.report_path})")
    emit([{k: v for k, v in r.items() if k != "partitions"} | {"partitions": r["partitions"]} for r in result["history"]],
         False, "resize history from SQL: SELECT ... FROM topic_history (partition:mode@epoch)")
    emit([{"member": m["member_id"], "partitions": ",".join(m["partitions"]), "rebalances": m["rebalances"]}
          for m in result["group"]["members"]], False, f"group {DEMO_GROUP} (generation {result['group']['generation']})")
    return result
