"""``lakelog audit``: check a topic's log, and a sink against it, for loss, duplicates and order."""

from __future__ import annotations

import click

from jobs.context import Context, json_option, pass_ctx
from jobs.output import emit, stdout


@click.command("audit")
@click.option("--topic", required=True)
@click.option("--sink", default=None, help="Delta sink table (a `consume --output` path) to audit against the log.")
@click.option("--report", "report_path", default=None, help="Markdown report path (default <root>/audit/<topic>-<time>.md).")
@click.option("--samples", default=10, show_default=True, type=click.IntRange(min=1), help="Sample violations per check.")
@click.option("--group", default=None, help="The group that wrote the sink (default: the groups its positions name).")
@click.option("--isolation-level", type=click.Choice(["read_uncommitted", "read_committed"]), default="read_uncommitted",
              show_default=True, help="The level the sink's consumer read at: under read_committed the sink owes only "
                                      "committed records and may hold no aborted one (Kafka's and lakelog's default: "
                                      "read_uncommitted).")
@click.option("--engine", type=click.Choice(["auto", "spark", "duckdb"]), default=None,
              help="What judges the tables (default: $LAKELOG_AUDIT_ENGINE, else auto): auto uses DuckDB when "
                   "it can, else Spark; spark or duckdb insists (duckdb refuses what it cannot read).")
@json_option
@pass_ctx
def audit(c: Context, topic: str, sink: str | None, report_path: str | None, samples: int, group: str | None,
          isolation_level: str, engine: str | None, as_json: bool) -> None:
    """Check TOPIC's log (dense offsets, non-decreasing epochs) and a sink (no loss, no
    duplicate, per-key order). Exits 1 when a check fails; the report says which records.

    On a local or S3 root, a log and sink of up to 2,000,000 rows together whose change feeds
    delta-rs reads whole are judged in this process by DuckDB: no JVM starts. Larger tables, a
    change feed Delta's log retention or VACUUM cut, a sink without a change feed and other
    stores are judged by Spark jobs (starts a JVM)."""
    from pipelines.audit import run_audit

    c.config
    report = run_audit(c.spark, c.root, topic, sink, report_path, samples, group, isolation_level, engine)
    if as_json:
        emit(report.model_dump(mode="json"), True)
    else:
        emit([{"check": k.name, "result": "pass" if k.passed else "FAIL", "checked": k.checked,
               "violations": k.violations} for k in report.checks], False,
             f"audit of {topic}: {'PASSED' if report.passed else 'FAILED'} ({report.seconds:.1f}s, {report.engine})")
        for note in report.coverage:
            stdout.print(note, highlight=False, soft_wrap=True)
        stdout.print(f"report: {report.report_path}", highlight=False, soft_wrap=True)
    if not report.passed:
        click.get_current_context().exit(1)
