"""What the audit reads: every record a topic's log remembers appending (its change feed), and
every row a sink holds with the sink version that delivered it, as far as Delta still has them
(commit files removed by log retention, data files by VACUUM: what could not be read is said).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pyarrow as pa

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from log_store.delta_sql import history, properties
from log_store.errors import InvalidConfigurationError
from log_store.rs_reader import FastReadUnavailable
from log_store.txn_marks import CONTROL_COLUMN


def _cdf(spark: SparkSession, path: str) -> DataFrame:
    try:
        return _feed_from(spark, path, 0)
    except AnalysisException as exc:
        raise InvalidConfigurationError(
            f"cannot read the change data feed of {path} ({str(exc).splitlines()[0]}); "
            "the audit needs a lakelog log or sink table (change data feed on)"
        ) from None


PRODUCED_COLUMNS = ("partition", "offset", "key", "sequence", "producer_id", CONTROL_COLUMN)


def _produced(frames, feed, truncations: list[int]):
    """``PRODUCED_COLUMNS`` of a log's change feed inserts with ``_change_type``, less the records
    a replica's truncation deleted (``truncations``: the versions of its DELETE commits): a
    returning old leader's records past where the next leader epoch began, never part of the
    topic's history; ``control`` null where the log has no such column (a log of an earlier
    release before its first marker: records only)."""
    have = set(frames.columns(feed))
    columns = ", ".join(f"f.`{c}`" if c in have else f"CAST(NULL AS STRING) AS `{c}`" for c in PRODUCED_COLUMNS)
    gone = ""
    if truncations:  # an insert is gone if a truncation after it deleted its offset
        gone = (" AND NOT EXISTS (SELECT 1 FROM {feed} g WHERE g._change_type = 'delete' AND g._commit_version IN ("
                + ", ".join(str(int(v)) for v in truncations) + ") AND g.`partition` = f.`partition` "
                "AND g.`offset` = f.`offset` AND f._commit_version < g._commit_version)")
    return frames.sql(f"SELECT {columns}, 'insert' AS _change_type FROM {{feed}} f WHERE f._change_type = 'insert'{gone}",
                      feed=feed)


def truncation_versions(commits: list[dict]) -> list[int]:
    """The versions of a log's truncations among its commits (``version``, ``userMetadata``): their
    DELETE commits say ``truncate`` in their metadata; a purge's or retention's do not."""
    return [int(c["version"]) for c in commits if '"lakelog":"truncate"' in (c.get("userMetadata") or "")]


def produced_rows(frames, path: str, storage: dict[str, str] | None = None):
    """Every record the log still remembers appending (its change feed's inserts, ``PRODUCED_COLUMNS``
    and ``_change_type``), kept in memory, and what of its past could not be read.

    A topic kept for months outlives two things the change feed needs: commit files older than
    Delta's ``delta.logRetentionDuration`` (removed at checkpoints), and data files VACUUM removed
    after retention, delete-records or a retirement took them out of the table. Then the feed is
    read from the oldest commit Delta still has, skipping removed files, and the table's current
    rows are added (records appended before that commit and still live). What is skipped lies
    below a log start or in a retired partition: no group can read it any more, and the report
    says that it was not judged. On DuckDB (``frames``) the whole feed is read by delta-rs, or
    FastReadUnavailable (Spark audits it)."""
    if frames.name == "duckdb":
        feed, commits = rs_change_feed(frames, path, storage, PRODUCED_COLUMNS)
        return frames.keep(_produced(frames, feed, truncation_versions(commits))), []
    spark = frames.spark
    if not _has_change_feed(spark, path):
        _cdf(spark, path)  # raises the error that says what the audit needs
    truncations = truncation_versions([r.asDict() for r in history(spark, path).select("version", "userMetadata").collect()])
    rows, reason = _read_now(lambda: _produced(frames, _feed_from(spark, path, 0), truncations))
    if rows is not None:
        return rows, []
    earliest = _earliest_version(spark, path)
    with _skipping_missing_files(spark):
        feed = _produced(frames, _feed_from(spark, path, earliest), truncations)
        live = _produced(frames, spark.read.format("delta").load(path).withColumn("_change_type", F.lit("insert")), [])
        rows = feed.unionByName(live).dropDuplicates(["partition", "offset"]).persist()
        rows.count()  # read now, while missing files are skipped: nothing else in the audit skips them
    note = (f"The log's full change feed could not be read ({reason}). It was read from version {earliest}, "
            "the oldest Delta still has, with the files VACUUM removed skipped, together with the records "
            "the log holds now. Records appended before that version and no longer in the log (below a log "
            "start, or in a retired partition) were not judged.")
    return rows, [note]


def rs_change_feed(frames, path: str, storage: dict[str, str] | None, columns: tuple[str, ...]):
    """``columns`` (those the table has) of the table's whole change feed read by delta-rs into
    ``frames`` (DuckDB's), and its commits (``version``, ``userMetadata``); FastReadUnavailable
    when delta-rs cannot read it whole as Spark would (the change feed off, a commit Delta's log
    retention removed, a file VACUUM removed, deletion vectors or column mapping, which delta-rs's
    change feed does not apply) or it holds more than ``frames.limit`` rows."""
    from deltalake import DeltaTable

    try:
        table = DeltaTable(path, storage_options=storage)
        conf = table.metadata().configuration
        if conf.get("delta.enableChangeDataFeed", "false").lower() != "true":
            raise FastReadUnavailable(f"{path} has no change data feed")
        if conf.get("delta.enableDeletionVectors", "false").lower() == "true" or \
                conf.get("delta.columnMapping.mode", "none") != "none":
            raise FastReadUnavailable(f"{path} has deletion vectors or column mapping")
        have = set(table.schema().to_arrow().names)
        wanted = [c for c in columns if c in have] + ["_change_type", "_commit_version"]
        quoted = [f'"{c}"' for c in wanted]  # ``offset`` is a keyword of delta-rs's SQL
        reader = pa.RecordBatchReader.from_stream(table.load_cdf(starting_version=0, columns=quoted))
        batches, rows = [], 0
        for batch in reader:
            rows += batch.num_rows
            if frames.limit is not None and rows > frames.limit:
                raise FastReadUnavailable(f"{path}'s change feed holds more than {frames.limit:,} rows")
            batches.append(batch)
        feed = pa.Table.from_batches(batches, reader.schema)
        commits = [{"version": c["version"], "userMetadata": c.get("userMetadata")} for c in table.history()]
    except FastReadUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - delta-rs's errors for a missing commit or file, a store it cannot read
        raise FastReadUnavailable(f"delta-rs could not read {path}'s change feed: {str(exc).splitlines()[0]}") from None
    return frames.table(feed), commits


# What a sink written by Spark from ``format("lakelog")`` (Kafka's columns) must keep for the audit:
# the rest of each record (producer id, sequence) is looked up in the log's change feed.
STREAM_SINK_COLUMNS = ("topic", "partition", "offset", "key")
# The delivery version (``_commit_version``) of a sink row whose commit Delta no longer has: it was
# delivered before the oldest commit kept, by the group judged (BEFORE_KEPT), or by one of the
# sink's several groups, which the missing commit would have named (UNATTRIBUTED).
BEFORE_KEPT = -1
UNATTRIBUTED = -2
SINK_ROW = ["topic", "partition", "offset"]
# The sink's columns the audit reads (those it has).
SINK_FEED_COLUMNS = ("topic", "partition", "offset", "key", "sequence", "producer_id")


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
    return int(history(spark, path).agg(F.min("version")).first()[0])


def sink_changes(frames, sink_path: str, produced=None, storage: dict[str, str] | None = None):
    """The sink's change feed, or for an append-only sink without one (Spark's Delta sink of a
    stream), its rows with the version that added each, read from its commit files; kept in
    memory, with what of the sink's past could not be read. ``produced`` (the log's change feed):
    fills in each row's producer id and sequence by (partition, offset).

    A sink kept for months loses its old commit files (``delta.logRetentionDuration``). Then a row
    whose commit is gone is taken from the sink's current rows, delivered at ``BEFORE_KEPT``:
    before every commit Delta kept, in an order among themselves that no longer can be judged.
    On DuckDB (``frames``) the sink's whole change feed is read by delta-rs, or
    FastReadUnavailable (Spark audits it)."""
    if frames.name == "duckdb":
        changes, notes = rs_change_feed(frames, sink_path, storage, SINK_FEED_COLUMNS)[0], []
    elif _has_change_feed(frames.spark, sink_path):
        changes, notes = _sink_feed(frames.spark, sink_path)
    else:
        changes, notes = _sink_adds(frames.spark, sink_path)
    if produced is None:
        return frames.keep(changes), notes
    columns = ", ".join(f"c.`{c}`" for c in frames.columns(changes) if c not in ("producer_id", "sequence"))
    joined = frames.keep(frames.sql(f"""
        SELECT {columns}, p.producer_id, p.`sequence` FROM {{changes}} c LEFT JOIN (
            SELECT `partition`, `offset`, producer_id, `sequence`,
                   row_number() OVER (PARTITION BY `partition`, `offset`
                                      ORDER BY producer_id ASC NULLS FIRST, `sequence` ASC NULLS FIRST) AS _n
            FROM {{produced}} WHERE _change_type = 'insert') p
        ON c.`partition` = p.`partition` AND c.`offset` = p.`offset` AND p._n = 1""", changes=changes, produced=produced))
    frames.release(changes)  # kept before the rows it was made of are let go
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
    """An append-only sink without a change feed (Spark's Delta sink of a stream): each row with
    the version of the commit that delivered it. That is the commit that added it with new data:
    a file added by a commit that changed none (OPTIMIZE, ``dataChange`` false) holds rows that
    commits before it delivered, so rows are read from the files data-changing commits added
    (still on disk after a compaction removed them from the table). Rows in the sink that no such
    file holds (those files were vacuumed, or their commits removed by Delta's log retention)
    count as delivered before every commit kept (``BEFORE_KEPT``), with a note."""
    adds = (spark.read.json(f"{sink_path}/_delta_log/*.json").where(F.col("add").isNotNull())
            .where(F.coalesce(F.col("add.dataChange"), F.lit(True)))
            .select(F.col("add.path").alias("_path"),
                    F.regexp_extract(F.input_file_name(), r"(\d+)\.json$", 1).cast("long").alias("_commit_version"))
            .collect())
    version = {_file_name(r["_path"]): int(r["_commit_version"]) for r in adds}
    live = spark.read.format("delta").load(sink_path)
    with _skipping_missing_files(spark):
        delivered = (spark.read.schema(live.schema).option("basePath", sink_path)
                     .parquet(*[f"{sink_path.rstrip('/')}/{r['_path']}" for r in adds]) if adds else live.limit(0))
        versions = spark.createDataFrame([(f, v) for f, v in version.items()], "_file string, _commit_version long")
        rows = (delivered.withColumn("_file", F.regexp_extract(F.col("_metadata.file_path"), r"([^/]+)$", 1))
                .join(versions, "_file").drop("_file").persist())
        rows.count()  # read now, while missing files are skipped
    # Copies in the sink now that no data-changing file still on disk holds: delivered before.
    found = rows.groupBy(*SINK_ROW).agg(F.count(F.lit(1)).alias("_found"))
    older = (live.groupBy(*SINK_ROW).agg(F.count(F.lit(1)).alias("_live"), F.first(F.struct(*live.columns)).alias("_row"))
             .join(found, SINK_ROW, "left")
             .select("_row.*", F.explode(F.array_repeat(F.lit(1), (F.col("_live") - F.coalesce("_found", F.lit(0)))
                                                        .cast("int"))).alias("_copy"))
             .drop("_copy").withColumn("_commit_version", F.lit(BEFORE_KEPT).cast("long")))
    rows = rows.unionByName(older).withColumn("_change_type", F.lit("insert")).persist()
    before = rows.where(F.col("_commit_version") == BEFORE_KEPT).count()
    if not before:
        return rows, []
    earliest = _earliest_version(spark, sink_path)
    return rows, [_older_deliveries_note(rows, earliest, "Some of the sink's rows are in no file a data-changing "
                                         "commit added that is still on disk: the sink's commits before version "
                                         f"{earliest} are gone (Delta's log retention), or VACUUM removed their files.")]


def _file_name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _older_deliveries_note(rows: DataFrame, earliest: int, what: str) -> str:
    older = rows.where(F.col("_commit_version") == BEFORE_KEPT).count()
    return (f"{what} {older} rows of the sink were delivered before version {earliest}: they count as delivered "
            "and as copies, and each key's first later delivery must follow the highest sequence among them, "
            "but their order among themselves was not judged.")


def _has_change_feed(spark: SparkSession, path: str) -> bool:
    return properties(spark, path).get("delta.enableChangeDataFeed", "false").lower() == "true"


