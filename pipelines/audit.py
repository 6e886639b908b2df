"""The ordering audit: checks the protocol's guarantee on a topic's log and a consumer's sink.

The guarantee (protocol.md): a key's records, produced in order by one producer, are delivered
in that order, none lost, none twice. The audit derives one DataFrame per question with Spark
(single-pass windows) and asks great-expectations to judge it, so every check has counts and
sample rows naming partitions, offsets and keys. A readable Markdown report is always written.

- log: per partition, offsets unique and dense from the partition's first offset; leader_epoch
  never decreasing as offset grows (rule 3). Retired partitions have no rows and pass.
- sink (optional): no (partition, offset) delivered twice; per (producer_id, key) the sequence
  strictly increases in delivery order (_commit_version, partition, offset); every record ever
  appended to the log (its change feed's inserts) was delivered, grouped by retired partition.
  On a log or sink whose old commits or files Delta has removed, what it still has
  (``produced_rows``, ``sink_changes``), and the report says what it could not judge.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

from delta.tables import DeltaTable
from pydantic import BaseModel, Field
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from control_plane.group.describe import DeliveryView, delivery_view
from control_plane.layout import RootLayout
from control_plane.topics import TopicAdmin
from log_store.engine import DeltaTransaction
from log_store.errors import InvalidConfigurationError, LakelogError
from log_store.files import write_file
from log_store.names import legacy_sink_pairs, parse_commit_metadata, parse_sink_app_id
from pipelines.consumer import SINK_SCHEMA


class OffsetRange(BaseModel):
    """A run of consecutive missing offsets in one partition."""

    partition: int
    first: int
    last: int
    count: int
    retired: bool


class CheckResult(BaseModel):
    name: str
    about: str
    expectation: str
    passed: bool
    checked: int
    violations: int
    samples: list[dict[str, Any]] = Field(default_factory=list)
    groups: dict[str, int] = Field(default_factory=dict)
    ranges: list[OffsetRange] = Field(default_factory=list)


class AuditReport(BaseModel):
    topic: str
    log_path: str
    sink_path: str | None
    audited_at: datetime
    seconds: float
    passed: bool
    checks: list[CheckResult]
    coverage: list[str] = Field(default_factory=list)  # what of the log's past the audit could not read
    report_path: str | None = None


# -- derived DataFrames (one window each) -----------------------------------------------------
def _cdf(spark: SparkSession, path: str) -> DataFrame:
    try:
        return _feed_from(spark, path, 0)
    except AnalysisException as exc:
        raise InvalidConfigurationError(
            f"cannot read the change data feed of {path} ({str(exc).splitlines()[0]}); "
            "the audit needs a lakelog log or sink table (change data feed on)"
        ) from None


PRODUCED_COLUMNS = ("partition", "offset", "key", "sequence", "producer_id")


def produced_rows(spark: SparkSession, path: str) -> tuple[DataFrame, list[str]]:
    """Every record the log still remembers appending (its change feed's inserts, ``PRODUCED_COLUMNS``
    and ``_change_type``), kept in memory, and what of its past could not be read.

    A topic kept for months outlives two things the change feed needs: commit files older than
    Delta's ``delta.logRetentionDuration`` (removed at checkpoints), and data files VACUUM removed
    after retention, delete-records or a retirement took them out of the table. Then the feed is
    read from the oldest commit Delta still has, skipping removed files, and the table's current
    rows are added (records appended before that commit and still live). What is skipped lies
    below a log start or in a retired partition: no group can read it any more, and the report
    says that it was not judged."""
    if not _has_change_feed(spark, path):
        _cdf(spark, path)  # raises the error that says what the audit needs
    rows, reason = _read_now(lambda: _feed_from(spark, path, 0).where(F.col("_change_type") == "insert")
                             .select(*PRODUCED_COLUMNS, "_change_type"))
    if rows is not None:
        return rows, []
    earliest = _earliest_version(spark, path)
    with _skipping_missing_files(spark):
        feed = _feed_from(spark, path, earliest).where(F.col("_change_type") == "insert").select(*PRODUCED_COLUMNS)
        live = spark.read.format("delta").load(path).select(*PRODUCED_COLUMNS)
        rows = (feed.unionByName(live).dropDuplicates(["partition", "offset"])
                .withColumn("_change_type", F.lit("insert")).persist())
        rows.count()  # read now, while missing files are skipped: nothing else in the audit skips them
    note = (f"The log's full change feed could not be read ({reason}). It was read from version {earliest}, "
            "the oldest Delta still has, with the files VACUUM removed skipped, together with the records "
            "the log holds now. Records appended before that version and no longer in the log (below a log "
            "start, or in a retired partition) were not judged.")
    return rows, [note]


# What a sink written by Spark from ``format("lakelog")`` (Kafka's columns) must keep for the audit:
# the rest of each record (producer id, sequence) is looked up in the log's change feed.
STREAM_SINK_COLUMNS = ("topic", "partition", "offset", "key")
# The delivery version (``_commit_version``) of a sink row whose commit Delta no longer has: it was
# delivered before the oldest commit kept, by the group judged (BEFORE_KEPT), or by one of the
# sink's several groups, which the missing commit would have named (UNATTRIBUTED).
BEFORE_KEPT = -1
UNATTRIBUTED = -2
SINK_ROW = ["topic", "partition", "offset"]


def _feed_from(spark: SparkSession, path: str, version: int) -> DataFrame:
    return spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", version).load(path)


def _read_now(rows: Callable[[], DataFrame]) -> tuple[DataFrame | None, str]:
    """The rows, kept in memory and read now (a missing commit or data file fails here, not in a
    check), or None and the first line of why Delta could not read them."""
    read = None
    try:
        read = rows().persist()
        read.count()
        return read, ""
    except Exception as exc:  # noqa: BLE001 - Delta's missing-version and missing-file errors
        if read is not None:
            read.unpersist()
        return None, str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


@contextmanager
def _skipping_missing_files(spark: SparkSession) -> Iterator[None]:
    """Reads skip data files VACUUM removed, for what is read inside (and only that)."""
    before = spark.conf.get("spark.sql.files.ignoreMissingFiles", "false")
    spark.conf.set("spark.sql.files.ignoreMissingFiles", "true")
    try:
        yield
    finally:
        spark.conf.set("spark.sql.files.ignoreMissingFiles", before)


def _earliest_version(spark: SparkSession, path: str) -> int:
    """The oldest version whose commit file Delta still has (0 until log cleanup removes some)."""
    return int(DeltaTable.forPath(spark, path).history().agg(F.min("version")).first()[0])


def sink_changes(spark: SparkSession, sink_path: str, produced: DataFrame | None = None) -> tuple[DataFrame, list[str]]:
    """The sink's change feed, or for an append-only sink without one (Spark's Delta sink of a
    stream), its rows with the version that added each, read from its commit files; kept in
    memory, with what of the sink's past could not be read. ``produced`` (the log's change feed):
    fills in each row's producer id and sequence by (partition, offset).

    A sink kept for months loses its old commit files (``delta.logRetentionDuration``). Then a row
    whose commit is gone is taken from the sink's current rows, delivered at ``BEFORE_KEPT``:
    before every commit Delta kept, in an order among themselves that no longer can be judged."""
    if _has_change_feed(spark, sink_path):
        changes, notes = _sink_feed(spark, sink_path)
    else:
        changes, notes = _sink_adds(spark, sink_path)
    if produced is None:
        return changes.persist(), notes
    ids = (produced.where(F.col("_change_type") == "insert")
           .select("partition", "offset", "producer_id", "sequence").dropDuplicates(["partition", "offset"]))
    joined = changes.drop("producer_id", "sequence").join(ids, ["partition", "offset"], "left").persist()
    joined.count()  # kept before the rows it was made of are let go
    changes.unpersist()
    return joined, notes


def _sink_feed(spark: SparkSession, sink_path: str) -> tuple[DataFrame, list[str]]:
    rows, reason = _read_now(lambda: _feed_from(spark, sink_path, 0))
    if rows is not None:
        return rows, []
    earliest = _earliest_version(spark, sink_path)
    with _skipping_missing_files(spark):
        feed = _feed_from(spark, sink_path, earliest)
        live = spark.read.format("delta").load(sink_path)
        # Copies in the sink now that the kept feed did not add: delivered before ``earliest``.
        net = feed.groupBy(*SINK_ROW).agg(F.sum(
            F.when(F.col("_change_type").isin("insert", "update_postimage"), 1)
            .when(F.col("_change_type").isin("delete", "update_preimage"), -1).otherwise(0)).alias("_net"))
        older = (live.groupBy(*SINK_ROW).agg(F.count(F.lit(1)).alias("_live"), F.first(F.struct(*live.columns)).alias("_row"))
                 .join(net, SINK_ROW, "left")
                 .select("_row.*", F.explode(F.array_repeat(F.lit(1), (F.col("_live") - F.coalesce("_net", F.lit(0)))
                                                            .cast("int"))).alias("_copy"))
                 .drop("_copy")
                 .select("*", F.lit("insert").alias("_change_type"), F.lit(BEFORE_KEPT).cast("long").alias("_commit_version"),
                         F.lit(None).cast("timestamp").alias("_commit_timestamp")))
        rows = feed.unionByName(older).persist()
        rows.count()  # read now, while missing files are skipped
    return rows, [_older_deliveries_note(rows, earliest, f"The sink's change feed could not be read from version 0 ({reason}). "
                                         f"It was read from version {earliest}, the oldest Delta still has, with the "
                                         "files VACUUM removed skipped.")]


def _sink_adds(spark: SparkSession, sink_path: str) -> tuple[DataFrame, list[str]]:
    added = (spark.read.json(f"{sink_path}/_delta_log/*.json").where(F.col("add").isNotNull())
             .select(F.regexp_extract("add.path", r"([^/]+)$", 1).alias("_file"),
                     F.regexp_extract(F.input_file_name(), r"(\d+)\.json$", 1).cast("long").alias("_commit_version")))
    rows = (spark.read.format("delta").load(sink_path)
            .withColumn("_file", F.regexp_extract(F.col("_metadata.file_path"), r"([^/]+)$", 1))
            .join(added, "_file", "left").drop("_file")
            .withColumn("_commit_version", F.coalesce("_commit_version", F.lit(BEFORE_KEPT).cast("long")))
            .withColumn("_change_type", F.lit("insert")))
    earliest = _earliest_version(spark, sink_path)
    if earliest == 0:
        return rows, []
    rows = rows.persist()
    return rows, [_older_deliveries_note(rows, earliest, f"The sink's commits before version {earliest} are gone "
                                         "(Delta's log retention).")]


def _older_deliveries_note(rows: DataFrame, earliest: int, what: str) -> str:
    older = rows.where(F.col("_commit_version") == BEFORE_KEPT).count()
    return (f"{what} {older} rows of the sink were delivered before version {earliest}: they count as delivered "
            "and as copies, and each key's first later delivery must follow the highest sequence among them, "
            "but their order among themselves was not judged.")


def attributed_to(changes: DataFrame, others: list[int], shared: bool) -> DataFrame:
    """One group's share of a sink: less the versions whose commits name another group
    (``others``). In a sink several groups write (``shared``), rows delivered before the oldest
    kept commit name no group: one copy of each counts as delivered for every group that did not
    deliver that record later, and is left out of the duplicate and order checks."""
    mine = changes.where(~F.col("_commit_version").isin(others)) if others else changes
    if not shared:
        return mine
    kept = mine.where(F.col("_commit_version") != BEFORE_KEPT)
    later = kept.where(F.col("_change_type") == "insert").select(*SINK_ROW).distinct()
    older = (mine.where(F.col("_commit_version") == BEFORE_KEPT).dropDuplicates(SINK_ROW)
             .join(later, SINK_ROW, "left_anti").withColumn("_commit_version", F.lit(UNATTRIBUTED).cast("long")))
    return kept.unionByName(older)


def _has_change_feed(spark: SparkSession, path: str) -> bool:
    props = DeltaTable.forPath(spark, path).detail().select("properties").first()["properties"] or {}
    return props.get("delta.enableChangeDataFeed", "false").lower() == "true"


def log_rows(log: DataFrame) -> DataFrame:
    """Each log row with the step from the previous offset and epoch of its partition."""
    w = Window.partitionBy("partition").orderBy("offset")
    return log.select(
        "partition", "offset", "leader_epoch", F.col("key").cast("string").alias("key"),
        F.lag("offset").over(w).alias("prev_offset"), F.lag("leader_epoch").over(w).alias("prev_epoch"),
    ).select("*", (F.col("offset") - F.col("prev_offset")).alias("gap"),
             (F.col("prev_epoch") - F.col("leader_epoch")).alias("epoch_drop"))


def delivered_rows(sink_changes: DataFrame, topic: str) -> DataFrame:
    """What the sink holds now for ``topic``: each row with its delivery version, copy number and
    the step from its key's previous sequence in delivery order (key as text, for the report).

    Net of deletes: a (partition, offset) deleted d times loses its d earliest deliveries. The
    order step is taken over first deliveries only, so a repeat counts as a duplicate, not as
    an order violation; unkeyed records have no per-key order. Rows delivered before the oldest
    kept commit (``BEFORE_KEPT``) are not judged for order among themselves: ordered by sequence,
    the highest is what the key's next delivery must follow; ``UNATTRIBUTED`` rows take no part.
    """
    adds = F.col("_change_type").isin("insert", "update_postimage")
    ident = Window.partitionBy("partition", "offset")
    older = F.col("_commit_version") == BEFORE_KEPT
    per_key = (Window.partitionBy("producer_id", "key")
               .orderBy("_commit_version", F.when(older, F.col("sequence")), "partition", "offset")
               .rowsBetween(Window.unboundedPreceding, -1))
    first = F.col("copy") == 1
    prev = F.last(F.when(first & (F.col("_commit_version") != UNATTRIBUTED), F.col("sequence")), ignorenulls=True).over(per_key)
    keyed = first & F.col("key").isNotNull() & F.col("producer_id").isNotNull() & (F.col("_commit_version") >= 0)
    return (
        sink_changes.where(F.col("topic") == topic)
        .withColumn("_removed", F.sum(F.when(adds, 0).otherwise(1)).over(ident))
        .where(adds)
        .withColumn("copy", F.row_number().over(ident.orderBy("_commit_version")) - F.col("_removed"))
        .where(F.col("copy") >= 1)
        .withColumn("prev_sequence", F.when(keyed, prev))
        .select("partition", "offset", F.col("key").cast("string").alias("key"), "sequence", "producer_id",
                "_commit_version", "copy", "prev_sequence",
                (F.col("sequence") - F.col("prev_sequence")).alias("sequence_step"))
    )


def missing_rows(produced: DataFrame, first_deliveries: DataFrame, retired: set[int],
                 views: list[DeliveryView] = ()) -> DataFrame:
    """Every record the sink's groups owe (every record ever appended, less the partitions
    retired before a group started), with the sink version that delivered it (null: never) and
    its ``outcome``: delivered, expired (its group reported it), or missing."""
    got = first_deliveries.select("partition", "offset", F.col("_commit_version").alias("delivered_in_version"))
    rows = produced.where(F.col("_change_type") == "insert")
    before = {p: end for v in views for p, end in v.before_view.items()}
    for p, end in before.items():
        rows = rows.where(~((F.col("partition") == p) & (F.col("offset") < end)))
    expired = F.lit(False)
    for r in (r for v in views for r in v.expired):
        expired = expired | ((F.col("partition") == r.partition) & (F.col("offset") >= r.first) & (F.col("offset") < r.end))
    return rows.select(
        "partition", "offset", F.col("key").cast("string").alias("key"), "sequence", "producer_id",
        F.col("partition").isin(sorted(retired)).alias("retired") if retired else F.lit(False).alias("retired"),
        expired.alias("expired"),
    ).join(got, ["partition", "offset"], "left").withColumn(
        "outcome", F.when(F.col("delivered_in_version").isNotNull(), "delivered")
        .when(F.col("expired"), "expired").otherwise("missing"))


# -- great-expectations ---------------------------------------------------------------------
def _gx():
    """A GX Spark data source in an ephemeral context, imported late (slow import) and quiet."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(), analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),
    )
    return gx.get_context(mode="ephemeral", project_config=config).data_sources.add_spark("lakelog_audit")


def _sortable(value: Any) -> tuple[int, Any]:
    return (0, value) if isinstance(value, (int, float)) else (1, str(value))


def _validate(source, name: str, df: DataFrame, checks: list[tuple[str, str, Any]], index: list[str], samples: int) -> list[CheckResult]:
    """Run ``checks`` (name, about, expectation) on ``df`` as one GX suite; samples name ``index``."""
    import great_expectations as gx

    owned = not df.is_cached
    df = df.persist()  # GX computes several metrics, each a Spark job: derive the windows once
    batch = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe(name).get_batch(
        batch_parameters={"dataframe": df}
    )
    suite = gx.ExpectationSuite(name=name, expectations=[e for _n, _a, e in checks])
    fmt = {"result_format": "SUMMARY", "partial_unexpected_count": samples, "unexpected_index_column_names": index}
    try:
        results = batch.validate(suite, result_format=fmt).results
    finally:
        if owned:
            df.unpersist()
    out = []
    for (check, about, _e), r in zip(checks, results):
        info = r.exception_info or {}
        errors = [e for e in ([info] if "raised_exception" in info else info.values()) if e.get("raised_exception")]
        if errors:
            raise LakelogError(f"audit check {check} could not run: {errors[0].get('exception_message')}")
        found = sorted(r.result.get("partial_unexpected_index_list") or [], key=lambda s: [_sortable(s.get(k)) for k in index])
        out.append(CheckResult(
            name=check, about=about, expectation=r.expectation_config.type, passed=bool(r.success),
            checked=int(r.result.get("element_count", 0)), violations=int(r.result.get("unexpected_count", 0)),
            samples=[{k: s.get(k) for k in index} for s in found],
        ))
    return out


def _missing_details(check: CheckResult, missing: DataFrame, max_ranges: int) -> CheckResult:
    """Which records are missing, as offset ranges per partition, counted by retired or live."""
    lost = missing.where(F.col("outcome") == "missing")
    groups = {("retired" if r["retired"] else "live"): int(r["count"]) for r in lost.groupBy("retired").count().collect()}
    run = F.col("offset") - F.row_number().over(Window.partitionBy("partition").orderBy("offset"))
    ranges = (
        lost.withColumn("_run", run).groupBy("partition", "_run", "retired")
        .agg(F.min("offset").alias("first"), F.max("offset").alias("last"), F.count("*").alias("count"))
        .orderBy("partition", "first").limit(max_ranges).collect()
    )
    return check.model_copy(update={"groups": groups, "ranges": [OffsetRange(**r.asDict()) for r in ranges]})


# -- the audit --------------------------------------------------------------------------------
def check_log(source, log: DataFrame, samples: int) -> list[CheckResult]:
    import great_expectations as gx

    E = gx.expectations
    checks = [
        ("log.offsets_unique", "no offset appears twice in a partition (gap 0: a repeat of the previous offset)",
         E.ExpectColumnValuesToBeBetween(column="gap", min_value=1)),
        ("log.offsets_dense", "each offset is the previous one + 1 (dense from the partition's first offset)",
         E.ExpectColumnValuesToBeBetween(column="gap", max_value=1)),
        ("log.epochs_non_decreasing", "leader_epoch never decreases as offset grows (rule 3)",
         E.ExpectColumnValuesToBeBetween(column="epoch_drop", max_value=0)),
    ]
    index = ["partition", "offset", "prev_offset", "leader_epoch", "prev_epoch", "key"]
    return _validate(source, "log", log_rows(log), checks, index, samples)


def check_sink(source, delivered: DataFrame, produced: DataFrame, retired: set[int], samples: int,
               views: list[DeliveryView] = (), asset: str = "sink") -> list[CheckResult]:
    """The sink checks of one group's deliveries (``asset``: a name of its own per group)."""
    import great_expectations as gx

    E = gx.expectations
    delivery = _validate(source, f"{asset}_delivered", delivered, [
        ("sink.no_duplicates", "no (partition, offset) is delivered twice (copy 2+: a repeated delivery)",
         E.ExpectColumnValuesToBeBetween(column="copy", max_value=1)),
        ("sink.per_key_order", "per (producer_id, key), sequence strictly increases in delivery order",
         E.ExpectColumnValuesToBeBetween(column="sequence_step", min_value=1)),
    ], ["partition", "offset", "key", "producer_id", "sequence", "prev_sequence", "_commit_version", "copy"], samples)
    missing = missing_rows(produced, delivered.where(F.col("copy") == 1), retired, views).persist()
    try:
        [lost] = _validate(source, f"{asset}_missing", missing, [
            ("sink.nothing_missing", "every record the group owes is in the sink, or its group reported it expired "
             "(its partition was retired before the group read it)",
             E.ExpectColumnValuesToBeInSet(column="outcome", value_set=["delivered", "expired"])),
        ], ["partition", "offset", "key", "sequence", "producer_id", "retired"], samples)
        if lost.violations:
            lost = _missing_details(lost, missing, max_ranges=max(samples, 50))
        expired = missing.where(F.col("outcome") == "expired").count()
        if expired:
            lost = lost.model_copy(update={"groups": {**lost.groups, "expired (reported)": expired}})
    finally:
        missing.unpersist()
    return delivery + [lost]


def sink_groups(spark: SparkSession, sink_path: str, topic: str) -> list[str]:
    """The groups that wrote ``topic``'s records to the sink (from its application ids; ids in
    the earlier releases' dotted form name every group they can stand for)."""
    out = set()
    for app_id in DeltaTransaction.start(spark, sink_path).snapshot_app_versions():
        sid = parse_sink_app_id(app_id)
        if sid is not None:
            if sid.topic == topic:
                out.add(sid.group)
        else:
            out.update(g for g, _t, _p, _i in legacy_sink_pairs(app_id, {topic}))
    return sorted(out)


def sink_commit_groups(spark: SparkSession, sink_path: str) -> dict[int, str]:
    """Sink version -> the group whose batch it committed, from each commit's metadata
    (``log_store.names.sink_commit_metadata``)."""
    out = {}
    for r in DeltaTable.forPath(spark, sink_path).history().select("version", "userMetadata").collect():
        meta = parse_commit_metadata(r["userMetadata"])
        if meta and meta.get("lakelog") == "sink" and isinstance(meta.get("group"), str):
            out[int(r["version"])] = meta["group"]
    return out


def run_audit(
    spark: SparkSession,
    root: str,
    topic: str,
    sink_path: str | None = None,
    report_path: str | None = None,
    samples: int = 10,
    group: str | None = None,
) -> AuditReport:
    """Audit ``topic`` (and a sink of it, written by ``group`` or by the groups its positions
    name); write the Markdown report and return the result."""
    started = time.perf_counter()
    record = TopicAdmin(spark, root).get(topic)  # UnknownTopicError names the topic
    if sink_path is not None:
        if not DeltaTable.isDeltaTable(spark, sink_path):
            raise InvalidConfigurationError(f"no Delta sink table at {sink_path}; pass the --output path given to `lakelog consume`")
        columns = set(spark.read.format("delta").load(sink_path).columns)
        lacking = set(SINK_SCHEMA.fieldNames()) - columns
        if lacking and not set(STREAM_SINK_COLUMNS) <= columns:
            raise InvalidConfigurationError(
                f"{sink_path} is neither a lakelog sink nor a stream's sink: it lacks columns "
                f"{sorted(lacking)} (a stream's sink needs at least {', '.join(STREAM_SINK_COLUMNS)})")
    source = _gx()
    checks = check_log(source, spark.read.format("delta").load(record.location), samples)
    coverage: list[str] = []
    if sink_path is not None:
        groups = [group] if group else sink_groups(spark, sink_path, topic)
        by_version = sink_commit_groups(spark, sink_path)
        produced, coverage = produced_rows(spark, record.location)
        retired = TopicAdmin(spark, root).image(topic).ever_retired()
        changes, sink_coverage = sink_changes(spark, sink_path, produced if lacking else None)
        coverage += sink_coverage
        if sink_coverage and len(groups) > 1:
            coverage.append(f"The sink is written by {len(groups)} groups and its oldest commits, which named the group "
                            "of each batch, are gone: a row delivered before them counts as delivered for every group "
                            "that did not deliver that record later, and is not judged for duplicates or order.")
        for i, g in enumerate(groups or [None]):
            # A sink several groups write is judged group by group: each sink commit names its group.
            # Commits that name none (written by earlier releases) count for every group.
            others = sorted(v for v, owner in by_version.items() if owner != g) if g is not None else []
            delivered = delivered_rows(attributed_to(changes, others, len(groups) > 1), topic).persist()
            # A sink without a group owes nothing below the log starts (retention, delete-records).
            views = ([delivery_view(spark, root, g, topic)] if g is not None else
                     [DeliveryView(group="", topic=topic, first_topic_version=0, expired=[],
                                   before_view=TopicAdmin(spark, root).log(topic).snapshot().log_starts)])
            try:
                found = check_sink(source, delivered, produced, retired, samples, views, f"sink{i or ''}")
            finally:
                delivered.unpersist()
            if len(groups) > 1:
                found = [c.model_copy(update={"name": f"{c.name}[{g}]"}) for c in found]
            checks += found
        changes.unpersist()
        produced.unpersist()
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    report = AuditReport(
        topic=topic, log_path=record.location, sink_path=sink_path, audited_at=now,
        seconds=round(time.perf_counter() - started, 2), passed=all(c.passed for c in checks), checks=checks,
        coverage=coverage,
    )
    path = report_path or f"{RootLayout(root).root}/audit/{topic}-{now:%Y%m%dT%H%M%SZ}.md"
    report = report.model_copy(update={"report_path": path})
    write_file(spark, path, to_markdown(report).encode())
    return report


# -- the report -------------------------------------------------------------------------------
def _table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    cols = list(rows[0])
    return ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols),
            *("| " + " | ".join("" if r.get(c) is None else str(r.get(c)) for c in cols) + " |" for r in rows), ""]


def to_markdown(report: AuditReport) -> str:
    """A report a person can read: the verdict, one line per check, then each failure's evidence."""
    lines = [
        f"# Ordering audit of topic `{report.topic}`: {'PASSED' if report.passed else 'FAILED'}", "",
        f"- log: `{report.log_path}`", f"- sink: `{report.sink_path or '(not audited)'}`",
        f"- audited at {report.audited_at:%Y-%m-%d %H:%M:%S} UTC in {report.seconds:.1f}s", "",
        *_table([{"check": c.name, "result": "pass" if c.passed else "FAIL", "rows checked": c.checked,
                  "violations": c.violations, "what it checks": c.about} for c in report.checks]),
    ]
    lines += [*(f"{note}\n" for note in report.coverage)]
    for c in report.checks:
        if c.groups.get("expired (reported)"):
            lines += [f"{c.groups['expired (reported)']} records were retired before the group read them; the group "
                      "reported them expired (`lakelog groups describe` lists the ranges).", ""]
    for c in (c for c in report.checks if not c.passed):
        lines += [f"## {c.name}: {c.violations} violations", "", f"{c.about} (`{c.expectation}`).", ""]
        if c.groups:
            lines += ["Missing records by partition state:", "", *_table([{"partitions": k, "records": v} for k, v in c.groups.items()])]
        if c.ranges:
            lines += ["Missing offsets:", "", *_table([r.model_dump() for r in c.ranges])]
        if c.samples:
            lines += [f"Sample violations ({len(c.samples)} of {c.violations}):", "", *_table(c.samples)]
    return "\n".join(lines) + "\n"
