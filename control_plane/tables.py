"""The control-plane Delta tables: creation, conditional inserts, and SQL names.

Tables (under ``<root>/control``): ``topics`` (one row per topic change) and ``offset_commits``
(one row per committed position). Both have the change data feed on, so every change can be
read back with ``table_changes`` as well as with history and time travel.
"""

from __future__ import annotations

import re

from delta.tables import DeltaTable
from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from control_plane.layout import RootLayout
from control_plane.records import OFFSET_SCHEMA, TOPIC_SCHEMA
from log_store.delta_txn import conflict_name
from log_store.errors import ConcurrentAppendError

TABLES = {"topics": TOPIC_SCHEMA, "offset_commits": OFFSET_SCHEMA}


class ControlTables:
    """The control plane of one root, as Spark sees it."""

    def __init__(self, spark: SparkSession, layout: RootLayout) -> None:
        self.spark = spark
        self.layout = layout

    def path(self, name: str) -> str:
        return self.layout.control(name)

    def ensure(self) -> None:
        """Create any missing control table (safe to race: a lost race finds the table made)."""
        for name, schema in TABLES.items():
            path = self.path(name)
            if DeltaTable.isDeltaTable(self.spark, path):
                continue
            try:
                (
                    DeltaTable.createIfNotExists(self.spark)
                    .location(path)
                    .addColumns(self.spark.createDataFrame([], schema).schema)
                    .property("delta.enableChangeDataFeed", "true")
                    .execute()
                )
            except Exception:  # a racing process created it first: fine if the table is there
                if not DeltaTable.isDeltaTable(self.spark, path):
                    raise

    def exists(self, name: str) -> bool:
        return DeltaTable.isDeltaTable(self.spark, self.path(name))

    def read(self, name: str) -> DataFrame:
        if not self.exists(name):
            return self.spark.createDataFrame([], TABLES[name])
        return self.spark.read.format("delta").load(self.path(name))

    def append(self, name: str, rows: list[dict]) -> None:
        """A blind append of rows: one commit."""
        self.ensure()
        df = self.spark.createDataFrame(rows, TABLES[name])
        df.write.format("delta").mode("append").save(self.path(name))

    def insert_if_absent(self, name: str, rows: list[dict], keys: list[str]) -> int:
        """Insert rows whose ``keys`` are not yet present, in one MERGE commit; return rows inserted.

        The MERGE reads the table, so two racing inserts of the same key cannot both succeed:
        the loser fails with ConcurrentAppendError or inserts nothing.
        """
        self.ensure()
        view = f"_lakelog_src_{name}"
        self.spark.createDataFrame(rows, TABLES[name]).createOrReplaceTempView(view)
        on = " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)
        try:
            metrics = self.spark.sql(
                f"MERGE INTO delta.`{self.path(name)}` t USING {view} s ON {on} "
                "WHEN NOT MATCHED THEN INSERT *"
            ).first()
        except (Py4JJavaError, AnalysisException) as exc:
            conflict = conflict_name(exc)
            if conflict:
                raise ConcurrentAppendError(f"a concurrent change to {name} won ({conflict})") from None
            raise
        return int(metrics["num_inserted_rows"])

    # -- SQL ---------------------------------------------------------------------------------
    def register_views(self) -> list[str]:
        """Register stable SQL names for the control plane and every topic's log; return them."""
        topics = self.read("topics")
        latest = topics.groupBy("topic").agg(F.max("topic_version").alias("topic_version"))
        current = topics.join(latest, ["topic", "topic_version"])
        names = {
            "topic_history": topics,
            "topics": current,
            "partitions": current.select(
                "topic", F.explode("partitions").alias("p"), "topic_version", "changed_at"
            ).select("topic", "p.*", "topic_version", "changed_at"),
            "offset_commits": self.read("offset_commits"),
        }
        commits = names["offset_commits"]
        names["group_offsets"] = commits.groupBy("group", "topic", "partition").agg(
            F.max_by("offset", "committed_at").alias("offset"),
            F.max("committed_at").alias("committed_at"),
            F.max_by("generation", "committed_at").alias("generation"),
        )
        for name, df in names.items():
            df.createOrReplaceTempView(name)
        for row in current.select("topic", "location").collect():
            view = "log_" + re.sub(r"[^A-Za-z0-9_]", "_", row["topic"])
            self.spark.read.format("delta").load(row["location"]).createOrReplaceTempView(view)
            names[view] = None
        return sorted(names)
