"""Kafka's message.timestamp.type per record (``log_store.timestamp_types``): a topic switched to
LogAppendTime reports its older records as CreateTime, as Kafka's batches keep their type."""

from __future__ import annotations

import pytest

from log_store.errors import InvalidConfigurationError
from log_store.timestamp_types import CREATE_TIME, LOG_APPEND_TIME, TIMESTAMP_TYPES_PROP, TimestampTypes


def test_a_log_without_switches_is_create_time_throughout():
    types = TimestampTypes.of({})
    assert types.current == CREATE_TIME and types.code_at(0, 10**9) == 0 and types.sql() == "0"


def test_records_take_the_type_of_the_last_switch_at_or_below_them():
    types = TimestampTypes().switched(LOG_APPEND_TIME, {0: 10, 1: 4})
    types = types.switched(CREATE_TIME, {0: 20, 1: 4})
    again = TimestampTypes.of({TIMESTAMP_TYPES_PROP: types.to_property()})
    assert again == types and again.current == CREATE_TIME
    assert [again.code_at(0, o) for o in (9, 10, 19, 20)] == [0, 1, 1, 0]
    assert [again.code_at(1, o) for o in (3, 4)] == [0, 0], "switched twice at 4: the last one holds"
    assert again.code_at(2, 0) == 0, "a partition made after both switches: the last one's type"
    assert TimestampTypes().switched(LOG_APPEND_TIME, {0: 5}).code_at(7, 0) == 1


def test_the_sql_expression_agrees_with_code_at():
    import duckdb

    types = TimestampTypes().switched(LOG_APPEND_TIME, {0: 10, 1: 4}).switched(CREATE_TIME, {0: 20})
    rows = [(p, o) for p in (0, 1, 2) for o in (0, 3, 4, 9, 10, 19, 20, 30)]
    expr = types.sql().replace("`", '"')
    got = duckdb.sql(f'SELECT {expr} FROM (VALUES {", ".join(f"({p}, {o})" for p, o in rows)}) '
                     't("partition", "offset")').fetchall()
    assert [g[0] for g in got] == [types.code_at(p, o) for p, o in rows]


def test_a_switch_to_the_current_type_is_none_and_unknown_types_are_refused():
    assert TimestampTypes().switched(CREATE_TIME, {0: 1}) is None
    with pytest.raises(InvalidConfigurationError, match="give CreateTime"):
        TimestampTypes().switched("BrokerTime", {0: 1})


def test_rows_appended_from_the_driver_take_the_appends_time_on_a_log_append_time_log():
    import datetime

    import pyarrow as pa

    from log_store.timestamp_types import stamp_log_append_time

    old = datetime.datetime(2001, 2, 3)
    rows = pa.table({"value": [b"a", b"b"], "timestamp": pa.array([old, None], pa.timestamp("us"))})
    assert stamp_log_append_time(rows, {}) is rows, "CreateTime: the producer's time"
    conf = {TIMESTAMP_TYPES_PROP: TimestampTypes().switched(LOG_APPEND_TIME, {0: 0}).to_property()}
    before = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    stamped = stamp_log_append_time(rows, conf)
    assert stamped.schema == rows.schema
    assert all(t >= before - datetime.timedelta(seconds=1) for t in stamped.column("timestamp").to_pylist())
