"""``lakelog demo``: the foundation's story on the local root, printed as tables."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from control_plane.layout import RootLayout
from control_plane.offsets import GroupOffsets
from control_plane.tables import ControlTables
from control_plane.topics import TopicAdmin
from jobs.output import emit, stderr
from log_store.config import LakelogConfig
from pipelines.consumer import Consumer
from pipelines.producer import Producer

DEMO_TOPIC = "demo-orders"
DEMO_GROUP = "demo-group"


def run_demo(spark: SparkSession, root: str, config: LakelogConfig, as_json: bool = False) -> dict:
    """Create (once) a 4-partition topic, produce 2,000 keyed records, consume them exactly once."""
    admin = TopicAdmin(spark, root)
    layout = RootLayout(root)
    report: dict = {"root": layout.root}
    if DEMO_TOPIC not in admin.current():
        admin.create(DEMO_TOPIC, 4)
        stderr.print(f"created topic {DEMO_TOPIC} with 4 partitions under {layout.root}")
    records = spark.range(2000).select(
        F.concat(F.lit("customer-"), (F.col("id") % 50).cast("string")).alias("key"),
        F.to_json(F.struct(F.col("id").alias("order"), (F.col("id") * 7 % 100).alias("amount"))).alias("value"),
    )
    produced = Producer(spark, root, DEMO_TOPIC, settings=config.producer).send(records)
    report["produced"] = produced.model_dump()
    sink = f"{layout.root}/sinks/{DEMO_GROUP}"
    consumed = Consumer(spark, root, DEMO_TOPIC, DEMO_GROUP, config.consumer).run_to_sink(sink)
    report["consumed"] = consumed.model_dump()
    report["topic"] = admin.describe(DEMO_TOPIC).model_dump(mode="json")
    report["group"] = [r.model_dump() for r in GroupOffsets(spark, root).describe(DEMO_GROUP)]
    ControlTables(spark, layout).register_views()
    order_check = spark.sql(
        f"SELECT key, count(*) AS records, "
        f"bool_and(seq_ok) AS in_order FROM (SELECT key, sequence > lag(sequence, 1, -1) "
        f"OVER (PARTITION BY key ORDER BY partition, offset) AS seq_ok FROM delta.`{sink}`) GROUP BY key"
    ).agg(F.count("*").alias("keys"), F.sum("records").alias("records"), F.min(F.col("in_order").cast("int")).alias("all_in_order")).first()
    report["sink_check"] = order_check.asDict()
    if as_json:
        emit(report, True)
        return report
    emit({k: v for k, v in report["produced"].items() if k != "per_partition"}, False, "1. produced 2,000 keyed records")
    emit({k: v for k, v in report["consumed"].items()}, False, f"2. consumed exactly once into {sink}")
    emit([{k: v for k, v in p.items() if k != "location"} for p in report["topic"]["partitions"]], False, f"3. topic {DEMO_TOPIC}")
    emit(report["group"], False, f"4. group {DEMO_GROUP}: committed offsets and lag")
    emit(report["sink_check"], False, "5. sink: per-key order by producer sequence (1 = every key in order)")
    history = spark.sql(
        "SELECT topic, topic_version, event, partition_count, changed_at FROM topic_history ORDER BY changed_at"
    ).collect()
    emit([r.asDict() for r in history], False, "6. `lakelog sql`: control-plane history (topic_history)")
    return report
