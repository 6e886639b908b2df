"""``lakelog sql``: Spark SQL over the control-plane tables and topic logs."""

from __future__ import annotations

import click

from jobs.context import Context, json_option, pass_ctx
from jobs.output import emit
from log_store.errors import LakelogError


@click.command()
@click.argument("query")
@click.option("--limit", default=1000, show_default=True, help="Most rows to print.")
@json_option
@pass_ctx
def sql(c: Context, query: str, limit: int, as_json: bool) -> None:
    """Run Spark SQL with the control-plane tables registered (topics, partitions,
    topic_history, offset_commits, group_offsets, log_<topic>)."""
    from pyspark.errors import AnalysisException, ParseException

    from control_plane.layout import RootLayout
    from control_plane.tables import ControlTables

    ControlTables(c.spark, RootLayout(c.root)).register_views()
    try:
        rows = [r.asDict(recursive=True) for r in c.spark.sql(query).limit(limit).collect()]
    except (AnalysisException, ParseException) as exc:
        raise LakelogError(f"SQL error: {str(exc).splitlines()[0]}") from None
    emit(rows, as_json, "result")
