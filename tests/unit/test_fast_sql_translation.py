"""``lakelog sql``'s JVM-free path translates Spark SQL to DuckDB keeping Spark's meaning and
Spark's column names, and refuses (so Spark answers) what it cannot keep."""

from __future__ import annotations

import duckdb
import pytest

from control_plane.fast_sql import to_duckdb
from log_store.rs_reader import FastReadUnavailable


def _answer(query: str) -> list[dict]:
    con = duckdb.connect()
    return con.sql(to_duckdb(query)).to_arrow_table().to_pylist()


def test_spark_meaning_is_kept_where_duckdb_differs():
    assert _answer("SELECT 7 / 2 AS q, 7 div 2 AS d, 7 % 2 AS m") == [{"q": 3.5, "d": 3, "m": 1}]
    assert _answer("SELECT 'orders' RLIKE '^ord' AS hit") == [{"hit": True}]
    assert _answer("SELECT try_cast('x' AS INT) AS x") == [{"x": None}]


@pytest.mark.parametrize("query", ["SELECT 1 / 0 AS x", "SELECT 1 / x FROM (SELECT 0 AS x)", "SELECT CAST('x' AS INT) AS x"])
def test_where_spark_stops_with_an_error_duckdb_stops_too(query):
    """Spark 4 runs in ANSI mode: these are errors there, so the command must not answer them
    here (a DuckDB error sends the query to Spark, which gives its own)."""
    with pytest.raises(duckdb.Error):
        _answer(query)


def test_unnamed_columns_get_spark_names():
    assert _answer("SELECT count(*), max(x), sum(x) / count(*), upper('a') FROM (SELECT 1 AS x)") == [
        {"count(1)": 1, "max(x)": 1, "(sum(x) / count(1))": 1.0, "upper(a)": "A"}]
    assert _answer("SELECT count(DISTINCT x, y) FROM (SELECT 1 AS x, 2 AS y)") == [{"count(DISTINCT x, y)": 1}]
    assert list(_answer("SELECT x FROM (SELECT 1 AS x) UNION ALL SELECT 2")[0]) == ["x"]


@pytest.mark.parametrize("query", [
    "SHOW VIEWS",
    "DESCRIBE topics",
    "SELECT size(partitions) FROM topics",  # a name Spark gives that is not rendered here
    "SELECT partitions[0] AS p FROM topics",  # out of range: Spark errs, DuckDB gives NULL
    "INSERT INTO topics VALUES (1)",
    "SELECT * FROM",
])
def test_what_cannot_be_answered_as_spark_would_is_left_to_spark(query):
    with pytest.raises(FastReadUnavailable):
        to_duckdb(query)
