"""``lakelog sql``: Spark SQL over the control-plane tables and topic logs."""

from __future__ import annotations

import click

from jobs.context import Context, json_option, pass_ctx
from jobs.output import emit


@click.command()
@click.argument("query")
@click.option("--limit", default=1000, show_default=True, help="Most rows to print.")
@json_option
@pass_ctx
def sql(c: Context, query: str, limit: int, as_json: bool) -> None:
    """Run Spark SQL with the control-plane tables registered (topics, partitions,
    topic_history, offset_commits, group_offsets, log_<topic>).

    On a local or S3 root a query is answered without starting Spark when it can be (the same views
    read with delta-rs, the query translated to DuckDB); otherwise, or with
    LAKELOG_FAST_READS=0, by Spark (starts a JVM)."""
    if c.fast_reads():
        from control_plane.fast_sql import FastSql
        from log_store.rs_reader import FastReadUnavailable

        try:
            return emit(FastSql(c.root, c.fast_storage).query(query, limit), as_json, "result")
        except FastReadUnavailable:
            pass  # Spark answers it, or gives its own error
    from control_plane.layout import RootLayout
    from control_plane.tables import ControlTables

    emit(ControlTables(c.spark, RootLayout(c.root)).query(query, limit), as_json, "result")
