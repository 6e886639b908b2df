"""``lakelog sql`` without starting Spark, for a local root: the same views, read with delta-rs,
and the query translated from Spark SQL to DuckDB by sqlglot.

Spark SQL stays the dialect: sqlglot keeps Spark's meaning where DuckDB's differs (``/`` is
fractional, ``count(DISTINCT a, b)``, ``explode``, ``rlike``, 0-based array subscripts, ...).
Whatever this reader cannot answer the way Spark would, it refuses with
``FastReadUnavailable`` and the command runs it on Spark: a statement other than a query
(``SHOW VIEWS``, ``DESCRIBE``), a construct sqlglot cannot translate, an error from DuckDB (Spark
then gives its own error or answer), a column without a name of its own whose Spark name is not
known here, or a table whose commit order delta-rs cannot read.
``tests/control_plane/test_fast_sql.py`` runs queries through both and compares.
"""

from __future__ import annotations

import logging

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel, SqlglotError

from control_plane.layout import RootLayout
from control_plane.tables import DERIVED_VIEWS, latest_position_rows, views_named
from log_store import rs_reader
from log_store.names import log_view_names
from log_store.rs_reader import FastReadUnavailable
from log_store.txn_marks import CONTROL_COLUMN

BASE_TABLES = {"topic_history": "topics", "offset_commits": "offset_commits",
               "group_generations": "group_generations", "group_members": "group_members",
               "topic_configs": "topic_configs", "record_deletions": "record_deletions",
               "replica_history": "topic_replicas", "transaction_history": "transactions"}
# group_offsets' columns (``control_plane.tables.GROUP_OFFSETS_COLUMNS``), typed as Spark types them.
GROUP_OFFSETS = pa.schema([("group", pa.string()), ("topic", pa.string()), ("partition", pa.int32()),
                           ("offset", pa.int64()), ("committed_at", pa.timestamp("us")), ("generation", pa.int32())])


def to_duckdb(query: str) -> str:
    """``query`` (Spark SQL) in DuckDB's dialect, or FastReadUnavailable."""
    logging.getLogger("sqlglot").setLevel(logging.ERROR)  # its warnings are not the user's business
    try:
        statements = sqlglot.parse(query, read="spark")
    except SqlglotError as exc:
        raise FastReadUnavailable(f"not parsed here: {exc}") from None
    if len(statements) != 1 or not isinstance(statements[0], exp.Query):
        raise FastReadUnavailable("not a query (SHOW, DESCRIBE, ...): Spark answers it")
    tree = statements[0]
    _name_columns_as_spark(tree)  # from the query as written
    tree = tree.transform(_as_ansi_spark)
    try:
        return tree.sql(dialect="duckdb", unsupported_level=ErrorLevel.RAISE)
    except SqlglotError as exc:
        raise FastReadUnavailable(f"not translated: {exc}") from None


def _as_ansi_spark(node: exp.Expression) -> exp.Expression:
    """Where Spark (ANSI mode, Spark 4's default) stops with an error, make DuckDB stop too, so
    the command falls back and Spark gives its error: division by zero (sqlglot's reading of
    Spark gives NULL, DuckDB's ``/`` infinity), a failed ``CAST`` (sqlglot reads it as a
    ``try_cast``). An array subscript (Spark errs out of range, DuckDB gives NULL) is left to Spark."""
    if isinstance(node, exp.Div):
        divisor = node.expression
        guarded = exp.Case(ifs=[exp.If(this=exp.EQ(this=divisor.copy(), expression=exp.Literal.number(0)),
                                       true=exp.Anonymous(this="error", expressions=[exp.Literal.string("division by zero")]))],
                           default=divisor.copy())
        return exp.Div(this=node.this, expression=guarded, typed=node.args.get("typed"), safe=False)
    if isinstance(node, exp.TryCast) and not node.args.get("safe"):  # Spark's CAST, not its try_cast
        return exp.Cast(**node.args)
    if isinstance(node, exp.Bracket):
        raise FastReadUnavailable("an array subscript: Spark answers it")
    return node


def _name_columns_as_spark(tree: exp.Query) -> None:
    """Give each output column without an alias the name Spark gives it (DuckDB names
    ``count(*)`` ``count_star()``, Spark ``count(1)``); FastReadUnavailable where that name is
    not known here. The output's names are those of the left-most select."""
    select = tree
    while not isinstance(select, exp.Select):
        if not isinstance(select, (exp.SetOperation, exp.Subquery)):
            raise FastReadUnavailable(f"a query of the form {type(select).__name__}: Spark answers it")
        select = select.this
    select.set("expressions", [e if isinstance(e, (exp.Alias, exp.Column, exp.Star)) else
                               exp.alias_(e, _spark_name(e), quoted=True) for e in select.expressions])


def _spark_name(e: exp.Expression) -> str:
    """Spark's name for an unnamed output column: its pretty SQL (``count(1)``, ``sum(records)``,
    ``max(offset)``, ``(a + b)``, ``upper(topic)``), for the forms whose rendering is known."""
    if isinstance(e, exp.Count) and (e.this is None or isinstance(e.this, exp.Star)):
        return "count(1)"
    if isinstance(e, exp.Count) and isinstance(e.this, exp.Distinct) and all(
            isinstance(a, exp.Column) for a in e.this.expressions):
        return f"count(DISTINCT {', '.join(a.name for a in e.this.expressions)})"
    if isinstance(e, exp.Literal):
        return e.this
    if isinstance(e, exp.Column):
        return e.name
    if isinstance(e, exp.Binary) and type(e) in _OPERATORS:
        return f"({_spark_name(e.left)} {_OPERATORS[type(e)]} {_spark_name(e.right)})"
    if isinstance(e, exp.Func) and not isinstance(e, exp.Anonymous):
        args = [a for a in e.args.values() if isinstance(a, exp.Expression)]
        if len(args) <= 1 and all(isinstance(a, (exp.Column, exp.Literal)) for a in args):
            name = e.sql_name().lower() if not isinstance(e, exp.Count) else "count"
            if name in _SPARK_FUNCTION_NAMES:
                inner = ", ".join(_spark_name(a) for a in args)
                return f"{name}({'DISTINCT ' if e.find(exp.Distinct) else ''}{inner})"
    raise FastReadUnavailable(f"the column {e.sql(dialect='spark')} has no name of its own: Spark names it")


_OPERATORS = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%"}
_SPARK_FUNCTION_NAMES = {"count", "sum", "min", "max", "avg", "upper", "lower", "length", "abs"}


class FastSql:
    """``lakelog sql`` over one local or S3 root, JVM-free (see the module's docstring). ``storage``:
    delta-rs storage options for a root in an object store."""

    def __init__(self, root: str, storage: rs_reader.Storage = None) -> None:
        self.layout = RootLayout(root)
        self.storage = storage

    def query(self, query: str, limit: int) -> list[dict]:
        import duckdb

        translated = to_duckdb(query)
        words = views_named(query)
        con = duckdb.connect()
        con.execute("SET TimeZone = 'UTC'")
        try:
            self._register(con, words)
            table = con.sql(translated).to_arrow_table()
        except duckdb.Error as exc:
            raise FastReadUnavailable(f"DuckDB: {str(exc).splitlines()[0]}") from None
        finally:
            con.close()
        return _python_rows(table.slice(0, limit))

    def _register(self, con, words: set[str]) -> None:
        """The views the query's words name, and those they are built from."""
        wanted = set(words)
        if any(w.startswith("log_") for w in wanted):
            wanted.add("topics")  # where the logs are
        for name, (sources, _) in reversed(DERIVED_VIEWS.items()):  # later views build on earlier ones
            if name in wanted:
                wanted.update(sources)
        for name, table in BASE_TABLES.items():
            if name in wanted:
                con.register(name, self._read(self.layout.control(table)))
        if "group_offsets" in wanted:
            con.register("group_offsets", self._group_offsets())
        for name, (_, text) in DERIVED_VIEWS.items():
            if name in wanted:
                con.execute(f"CREATE VIEW {name} AS {sqlglot.transpile(text, read='spark', write='duckdb')[0]}")
        if "topics" in wanted:
            locations = dict(con.execute("SELECT topic, location FROM topics").fetchall())
            for name, topic in log_view_names(list(locations)).items():
                if name.lower() in wanted:
                    con.register(name, _with_control(self._read(locations[topic])))

    def _read(self, path: str) -> pa.Table:
        if not rs_reader.exists(path, self.storage):  # a root without topics yet, a deleted topic's log
            raise FastReadUnavailable(f"no table at {path}")
        try:
            return rs_reader.arrow(path, storage=self.storage)
        except Exception as exc:  # a log that is no Delta table, ...: Spark gives its own error
            raise FastReadUnavailable(f"{path}: {exc}") from None

    def _group_offsets(self) -> pa.Table:
        """As ``ControlTables`` builds it with Spark: the rule's plain-Python twin over rows in commit order."""
        rows = latest_position_rows(rs_reader.rows_in_commit_order(self.layout.control("offset_commits"), storage=self.storage))
        return pa.Table.from_pylist([{c: r[c] for c in GROUP_OFFSETS.names} for r in rows.values()], schema=GROUP_OFFSETS)


def _with_control(log: pa.Table) -> pa.Table:
    """A log's rows with the ``control`` column, as Spark's view has it (null: a record)."""
    if CONTROL_COLUMN in log.column_names:
        return log
    return log.append_column(CONTROL_COLUMN, pa.nulls(log.num_rows, pa.string()))


def _python_rows(table: pa.Table) -> list[dict]:
    """Rows as Spark's ``Row.asDict(recursive=True)`` gives them: maps as dicts, timestamps naive (UTC)."""
    return [{f.name: _value(row[f.name], f.type) for f in table.schema} for row in table.to_pylist()]


def _value(v, t: pa.DataType):
    if v is None:
        return None
    if pa.types.is_map(t):
        return {k: _value(x, t.item_type) for k, x in v}
    if pa.types.is_struct(t):
        return {f.name: _value(v[f.name], f.type) for f in t}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [_value(x, t.value_type) for x in v]
    if pa.types.is_decimal(t) and t.scale == 0:  # DuckDB sums integers as HUGEINT, Spark as BIGINT
        return int(v)
    if pa.types.is_timestamp(t) and t.tz is not None:
        return v.replace(tzinfo=None)  # the connection's time zone is UTC
    return v

