"""``run_audit``: the log's checks, then a sink's, group by group; the Markdown report."""

from __future__ import annotations

import time
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, Field
from pyspark.sql import SparkSession

from control_plane.group.describe import DeliveryView, delivery_view
from control_plane.layout import RootLayout
from control_plane.topics import TopicAdmin
from log_store import commits
from log_store.delta_sql import history
from log_store.errors import InvalidConfigurationError
from log_store.files import write_file
from log_store.names import legacy_sink_pairs, parse_commit_metadata, parse_sink_app_id
from log_store.rs_reader import FastReadUnavailable, columns_at
from log_store.table_create import table_exists
from pipelines.audit.checks import CheckResult, _gx, check_log, check_sink
from pipelines.audit.feeds import STREAM_SINK_COLUMNS, produced_rows, sink_changes
from pipelines.audit.frames import SMALL_ROWS, DuckFrames, SparkFrames, engine_setting
from pipelines.audit.rows import attributed_to, delivered_rows
from pipelines.audit.txn import READ_UNCOMMITTED, check_isolation_level, with_states
from pipelines.consumer import SINK_SCHEMA


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
    engine: str = "spark"  # what judged it: "spark" (Spark's jobs) or "duckdb" (in this process, no JVM)


def sink_groups(spark: SparkSession, sink_path: str, topic: str) -> list[str]:
    """The groups that wrote ``topic``'s records to the sink (from its application ids; ids in
    the earlier releases' dotted form name every group they can stand for)."""
    out = set()
    txn = commits.start(spark, sink_path, "the sink")
    versions = txn.snapshot_app_versions()
    txn.release()
    for app_id in versions:
        sid = parse_sink_app_id(app_id)
        if sid is not None:
            if sid.topic == topic:
                out.add(sid.group)
        else:
            out.update(g for g, _t, _p, _i in legacy_sink_pairs(app_id, {topic}))
    return sorted(out)


def sink_commit_groups(table_commits: list[dict]) -> dict[int, str]:
    """Sink version -> the group whose batch it committed, from each commit's metadata
    (``log_store.names.sink_commit_metadata``) among the sink's commits (``version``, ``userMetadata``)."""
    out = {}
    for r in table_commits:
        meta = parse_commit_metadata(r.get("userMetadata"))
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
    isolation_level: str = READ_UNCOMMITTED,
    engine: str | None = None,
) -> AuditReport:
    """Audit ``topic`` (and a sink of it, written by ``group`` or by the groups its positions
    name, reading at ``isolation_level``: Kafka's, read_uncommitted, by default, as lakelog's
    consumers); write the Markdown report and return the result. ``engine`` (default
    ``$LAKELOG_AUDIT_ENGINE``, else auto): auto judges small tables that delta-rs reads whole in
    this process (DuckDB, no JVM) and the rest with Spark's jobs (``frames``)."""
    started = time.perf_counter()
    check_isolation_level(isolation_level)
    chosen = engine_setting(engine)
    record = TopicAdmin(spark, root).get(topic)  # UnknownTopicError names the topic
    stores = _delta_rs_stores(spark, chosen, [record.location] + ([sink_path] if sink_path else []))
    if sink_path is not None and not table_exists(spark, sink_path):
        raise InvalidConfigurationError(f"no Delta sink table at {sink_path}; pass the --output path given to `lakelog consume`")
    checks = coverage = None
    if stores is not None:
        frames = DuckFrames(limit=None if chosen == "duckdb" else SMALL_ROWS)
        try:
            checks, coverage = _audit(frames, spark, root, record, sink_path, samples, group, isolation_level, stores)
        except FastReadUnavailable as exc:
            if chosen == "duckdb":
                raise InvalidConfigurationError(f"the audit cannot run on DuckDB: {exc}; run it with Spark "
                                                "(--engine spark or auto)") from None
        finally:
            frames.close()
    if checks is None:
        frames = SparkFrames(spark)
        try:
            checks, coverage = _audit(frames, spark, root, record, sink_path, samples, group, isolation_level, None)
        finally:
            frames.close()
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    report = AuditReport(
        topic=topic, log_path=record.location, sink_path=sink_path, audited_at=now,
        seconds=round(time.perf_counter() - started, 2), passed=all(c.passed for c in checks), checks=checks,
        coverage=coverage, engine=frames.name,
    )
    path = report_path or f"{RootLayout(root).root}/audit/{topic}-{now:%Y%m%dT%H%M%SZ}.md"
    report = report.model_copy(update={"report_path": path})
    write_file(spark, path, to_markdown(report).encode())
    return report


def _delta_rs_stores(spark: SparkSession, chosen: str, paths: list[str]) -> dict[str, dict | None] | None:
    """Each table's delta-rs storage options when DuckDB may audit them (``chosen`` allows it,
    delta-rs reads every one, and auto's tables hold at most ``SMALL_ROWS`` rows together); else None."""
    from log_store.object_store import delta_rs_reads

    if chosen == "spark":
        return None
    stores, rows = {}, 0
    for path in paths:
        readable, storage = delta_rs_reads(spark, path)
        if not readable:
            if chosen == "duckdb":
                raise InvalidConfigurationError(f"the audit cannot run on DuckDB: delta-rs does not read {path} "
                                                "(only local and S3 roots); run it with Spark (--engine spark or auto)")
            return None
        held = _rows_held(path, storage)
        if held is None:  # delta-rs cannot open it: Spark says what is wrong, or reads it
            if chosen == "duckdb":
                raise InvalidConfigurationError(f"the audit cannot run on DuckDB: delta-rs cannot open {path}; "
                                                "run it with Spark (--engine spark or auto)")
            return None
        stores[path] = storage
        rows += held
    return stores if chosen == "duckdb" or rows <= SMALL_ROWS else None


def _rows_held(path: str, storage: dict | None) -> int | None:
    """The rows of the table's files (their statistics; a change feed holds at least as many), or
    None where delta-rs cannot open the table (none there, a store or feature it cannot read)."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    from log_store.rs_reader import arrow_table

    try:
        files = arrow_table(DeltaTable(path, storage_options=storage).get_add_actions(flatten=True))
    except Exception:  # noqa: BLE001 - delta-rs's errors: Spark's turn
        return None
    return int(pc.sum(files.column("num_records")).as_py() or 0) if files.num_rows else 0


def _audit(frames, spark: SparkSession, root: str, record, sink_path: str | None, samples: int, group: str | None,
           isolation_level: str, stores: dict[str, dict | None] | None) -> tuple[list[CheckResult], list[str]]:
    """The log's checks, then the sink's, group by group, on ``frames`` (``stores``: delta-rs's
    storage options of each table, for DuckDB's reads)."""
    topic = record.topic
    store = (stores or {}).get
    lacking: set[str] = set()
    if sink_path is not None:
        columns = set(_columns(frames, sink_path, store(sink_path)))
        lacking = set(SINK_SCHEMA.fieldNames()) - columns
        if lacking and not set(STREAM_SINK_COLUMNS) <= columns:
            raise InvalidConfigurationError(
                f"{sink_path} is neither a lakelog sink nor a stream's sink: it lacks columns "
                f"{sorted(lacking)} (a stream's sink needs at least {', '.join(STREAM_SINK_COLUMNS)})")
    source = _gx(frames)
    snap = TopicAdmin(spark, root).log(topic).snapshot()  # the log read at the version its cleaned offsets are of
    if frames.name == "duckdb":
        log = frames.table(columns_at(record.location, snap.version, list(LOG_COLUMNS), store(record.location)))
    else:
        log = spark.read.format("delta").option("versionAsOf", snap.version).load(record.location)
    checks = check_log(frames, source, log, samples, snap.cleaned)
    coverage: list[str] = []
    if sink_path is None:
        return checks, coverage
    groups = [group] if group else sink_groups(spark, sink_path, topic)
    feed, coverage = produced_rows(frames, record.location, store(record.location))
    produced = frames.keep(with_states(frames, feed, {p: snap.stable_end(p) for p in snap.log_ends}))
    frames.release(feed)
    partial = bool(coverage)  # the log's feed is only what it still remembers
    retired = TopicAdmin(spark, root).image(topic).ever_retired()
    changes, sink_coverage = sink_changes(frames, sink_path, produced if lacking else None, store(sink_path))
    by_version = sink_commit_groups(_commits(frames, sink_path, store(sink_path)))
    coverage += sink_coverage
    if sink_coverage and len(groups) > 1:
        coverage.append(f"The sink is written by {len(groups)} groups and its oldest commits, which named the group "
                        "of each batch, are gone: a row delivered before them counts as delivered for every group "
                        "that did not deliver that record later, and is not judged for duplicates or order.")
    for i, g in enumerate(groups or [None]):
        # A sink several groups write is judged group by group: each sink commit names its group.
        # Commits that name none (written by earlier releases) count for every group.
        others = sorted(v for v, owner in by_version.items() if owner != g) if g is not None else []
        delivered = frames.keep(delivered_rows(frames, attributed_to(frames, changes, others, len(groups) > 1), topic))
        # A sink without a group owes nothing below the log starts (retention, delete-records).
        views = ([delivery_view(spark, root, g, topic)] if g is not None else
                 [DeliveryView(group="", topic=topic, first_topic_version=0, expired=[],
                               before_view=TopicAdmin(spark, root).log(topic).snapshot().log_starts)])
        try:
            found = check_sink(frames, source, delivered, produced, retired, samples, views, f"sink{i or ''}",
                               snap.log_starts if partial else None, isolation_level)
        finally:
            frames.release(delivered)
        if len(groups) > 1:
            found = [c.model_copy(update={"name": f"{c.name}[{g}]"}) for c in found]
        checks += found
    frames.release(changes)
    frames.release(produced)
    return checks, coverage


@contextmanager
def _delta_rs_errors(path: str):
    """delta-rs failing to read ``path``: FastReadUnavailable (Spark reads it, or says what is wrong)."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - delta-rs's own errors
        raise FastReadUnavailable(f"delta-rs could not read {path}: {str(exc).splitlines()[0]}") from None


# the log's columns the log checks read
LOG_COLUMNS = ("partition", "offset", "leader_epoch", "key")


def _columns(frames, path: str, storage: dict | None) -> list[str]:
    if frames.name == "duckdb":
        from deltalake import DeltaTable

        with _delta_rs_errors(path):
            return list(DeltaTable(path, storage_options=storage).schema().to_arrow().names)
    return list(frames.spark.read.format("delta").load(path).columns)


def _commits(frames, path: str, storage: dict | None) -> list[dict]:
    """The table's commits still in its log: ``version`` and ``userMetadata`` of each."""
    if frames.name == "duckdb":
        from deltalake import DeltaTable

        with _delta_rs_errors(path):
            return [{"version": c["version"], "userMetadata": c.get("userMetadata")}
                    for c in DeltaTable(path, storage_options=storage).history()]
    return [r.asDict() for r in history(frames.spark, path).select("version", "userMetadata").collect()]


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
        f"- audited at {report.audited_at:%Y-%m-%d %H:%M:%S} UTC in {report.seconds:.1f}s by {report.engine}", "",
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
