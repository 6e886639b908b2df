"""Where the audit's questions run: as Spark jobs, or in this process by DuckDB on what delta-rs
read (no JVM). The questions are written once, in Spark SQL (``rows``, ``checks``, ``txn``), with
the tables they ask about as ``{name}`` placeholders; DuckDB runs them translated by sqlglot
(``control_plane.fast_sql.to_duckdb``, which keeps Spark's meaning where DuckDB's differs).

DuckDB audits what fits one process comfortably: a log and a sink on a local or S3 root that
delta-rs reads whole (every commit and file still there: ``feeds.rs_change_feed``), of at most
``SMALL_ROWS`` rows together. Everything else (a larger table, a change feed Delta's log
retention or VACUUM cut, a stream's sink without a change feed, another object store) is Spark's.
"""

from __future__ import annotations

import itertools
import os
import re
from typing import Any

import pyarrow as pa

# What DuckDB audits without a JVM: the log's and the sink's rows together, at most (a few hundred
# MB of Arrow in this process; Spark's jobs take over above it).
SMALL_ROWS = 2_000_000
ENGINES = ("auto", "spark", "duckdb")
ENGINE_ENV = "LAKELOG_AUDIT_ENGINE"
KEY_AS_TEXT = 'CAST("key" AS TEXT)'  # the audit's SQL's ``CAST(`key` AS STRING)`` as sqlglot writes it for DuckDB


class SparkFrames:
    """The audit's tables as Spark DataFrames: ``sql`` is ``spark.sql`` with DataFrames for its
    ``{name}`` placeholders."""

    name = "spark"

    def __init__(self, spark) -> None:
        self.spark = spark
        self._names = itertools.count()
        self._views: list[str] = []

    def sql(self, query: str, **tables):
        names = {}
        for placeholder, frame in tables.items():
            names[placeholder] = f"lakelog_audit_{id(self)}_{next(self._names)}"
            frame.createOrReplaceTempView(names[placeholder])
            self._views.append(names[placeholder])
        return self.spark.sql(_placed(query, names))

    def keep(self, table):
        """``table`` computed once and kept (in memory) for the questions asked of it next."""
        table = table.persist()
        table.count()
        return table

    def release(self, table) -> None:
        table.unpersist()

    def count(self, table) -> int:
        return table.count()

    def rows(self, table) -> list[dict[str, Any]]:
        return [r.asDict() for r in table.collect()]

    def columns(self, table) -> list[str]:
        return list(table.columns)

    def gx_source(self, context):
        # GX takes the active session, or makes one of its own (without Delta): lakelog's first
        self.spark.version  # noqa: B018 - starts a session not yet started (a command's LazySession)
        return context.data_sources.add_spark("lakelog_audit")

    def gx_frame(self, table):
        return table

    def close(self) -> None:
        for view in self._views:
            self.spark.catalog.dropTempView(view)


class DuckFrames:
    """The audit's tables as DuckDB views over Arrow tables read by delta-rs: no JVM. A table is
    the name of a view in this connection; ``sql`` translates Spark SQL for DuckDB."""

    name = "duckdb"

    def __init__(self, limit: int | None = SMALL_ROWS) -> None:
        import duckdb

        self.limit = limit  # the most rows of a change feed read here (None: no limit)
        self.con = duckdb.connect()
        self.con.execute("SET TimeZone = 'UTC'")
        self._names = itertools.count()
        self._arrow: set[str] = set()  # the tables holding Arrow data (the rest are views)

    def table(self, arrow: pa.Table) -> str:
        """An Arrow table as a table of this connection."""
        name = f"audit_{next(self._names)}"
        self.con.register(name, _plain_types(arrow))
        self._arrow.add(name)
        return name

    def sql(self, query: str, **tables: str) -> str:
        from control_plane.fast_sql import to_duckdb

        import duckdb

        from log_store.rs_reader import FastReadUnavailable

        name = f"audit_{next(self._names)}"
        # a key as text, as Spark's CAST decodes it (DuckDB's escapes every byte past ASCII): UTF-8
        text = to_duckdb(_placed(query, tables)).replace(KEY_AS_TEXT, f"coalesce(try(decode(\"key\")), {KEY_AS_TEXT})")
        try:
            self.con.sql(text).create_view(name)
        except duckdb.Error as exc:  # Spark answers what DuckDB cannot
            raise FastReadUnavailable(f"DuckDB: {str(exc).splitlines()[0]}") from None
        return name

    def keep(self, table: str) -> str:
        import duckdb

        from log_store.rs_reader import FastReadUnavailable

        try:
            return self.table(self.con.table(table).to_arrow_table())
        except duckdb.Error as exc:
            raise FastReadUnavailable(f"DuckDB: {str(exc).splitlines()[0]}") from None

    def release(self, table: str) -> None:
        """Let ``table``'s rows go (what was derived from it was kept already)."""
        if table in self._arrow:
            self.con.unregister(table)
            self._arrow.discard(table)

    def count(self, table: str) -> int:
        return int(self.con.sql(f'SELECT count(*) FROM "{table}"').fetchall()[0][0])

    def rows(self, table: str) -> list[dict[str, Any]]:
        return self.con.table(table).to_arrow_table().to_pylist()

    def arrow(self, table: str) -> pa.Table:
        return self.con.table(table).to_arrow_table()

    def columns(self, table: str) -> list[str]:
        return list(self.con.table(table).columns)

    def gx_source(self, context):
        return context.data_sources.add_pandas("lakelog_audit")

    def gx_frame(self, table: str):
        """A pandas frame with nullable integer columns (a null stays a null, not NaN)."""
        import pandas as pd

        types = {pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(), pa.int32(): pd.Int32Dtype(),
                 pa.int64(): pd.Int64Dtype(), pa.string(): pd.StringDtype(), pa.bool_(): pd.BooleanDtype()}
        return self.arrow(table).to_pandas(types_mapper=types.get)

    def close(self) -> None:
        self.con.close()


def _placed(query: str, names: dict[str, str]) -> str:
    """``query`` with each ``{placeholder}`` of ``names`` replaced by its table's name (and no
    other brace touched: a literal may hold one)."""
    return re.sub(r"\{(\w+)\}", lambda m: f"`{names[m.group(1)]}`" if m.group(1) in names else m.group(0), query)


def _plain_types(table: pa.Table) -> pa.Table:
    """delta-rs's view types and unsigned versions as the types Spark reads (string, binary,
    bigint), so both engines answer alike."""
    fields = []
    for f in table.schema:
        t = f.type
        if pa.types.is_string_view(t) or pa.types.is_large_string(t):
            t = pa.string()
        elif pa.types.is_binary_view(t) or pa.types.is_large_binary(t):
            t = pa.binary()
        elif pa.types.is_unsigned_integer(t):
            t = pa.int64()
        fields.append(pa.field(f.name, t, f.nullable))
    return table.cast(pa.schema(fields))


def engine_setting(engine: str | None) -> str:
    """The engine asked for (``engine``, else ``$LAKELOG_AUDIT_ENGINE``, else auto)."""
    from log_store.errors import InvalidConfigurationError

    chosen = engine or os.environ.get(ENGINE_ENV) or "auto"
    if chosen not in ENGINES:
        raise InvalidConfigurationError(f"audit engine {chosen!r} is not one of {', '.join(ENGINES)} "
                                        f"(--engine or ${ENGINE_ENV})")
    return chosen
