"""``lakelog sql``: Spark SQL over the control-plane tables and topic logs."""

from __future__ import annotations

import re

import click

from jobs.context import Context, json_option, pass_ctx
from jobs.output import emit
from log_store.errors import LakelogError


def views_named(query: str) -> set[str] | None:
    """The names a query may read (its words, lower case), or None for all of them: ``SHOW``
    lists every view. Registering only these keeps a query off the tables it does not read."""
    if re.match(r"\s*show\b", query, re.IGNORECASE):
        return None
    return {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", query)}


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

    ControlTables(c.spark, RootLayout(c.root)).register_views(views_named(query))
    try:
        rows = [r.asDict(recursive=True) for r in c.spark.sql(query).limit(limit).collect()]
    except (AnalysisException, ParseException) as exc:
        raise LakelogError(f"SQL error: {str(exc).splitlines()[0]}") from None
    emit(rows, as_json, "result")
