"""The filter a batch reads its offset ranges with (no Spark: its meaning checked with DuckDB)."""

import duckdb
import sqlglot
from hypothesis import given, settings
from hypothesis import strategies as st

from log_store.read_ranges import batch_position, offset_spans, ordering_keys, range_filter, spark_hash_partition


def test_spans_are_the_union_of_the_ranges():
    assert offset_spans({0: (50, 60), 1: (55, 70), 2: (0, 5), 3: (9, 9)}) == [(0, 5), (50, 70)]
    assert offset_spans({0: (0, 5), 1: (5, 8)}) == [(0, 8)]  # touching ranges make one span


def test_more_disjoint_ranges_than_spans_join_across_the_narrowest_gaps():
    ranges = {0: (0, 10), 1: (12, 20), 2: (100, 110), 3: (200, 210), 4: (1000, 1010)}
    assert offset_spans(ranges, max_spans=3) == [(0, 110), (200, 210), (1000, 1010)]
    assert len(offset_spans({p: (p * 100, p * 100 + 10) for p in range(64)})) == 4


def test_no_wanted_records_no_filter():
    assert range_filter({}) is None
    assert range_filter({3: (7, 7)}) is None


PARTITIONS, OFFSETS = 14, 60
ROWS = {(p, o) for p in range(PARTITIONS) for o in range(OFFSETS)}


def _query(ranges, columns="`partition`, `offset`"):
    """The rows of ``ROWS`` the filter keeps, evaluated by DuckDB on Spark SQL translated by
    sqlglot (the same translation ``lakelog sql`` uses)."""
    con = duckdb.connect()
    con.execute(f'CREATE TABLE t AS SELECT (i // {OFFSETS})::INTEGER AS "partition", (i % {OFFSETS})::BIGINT AS "offset" '
                f"FROM range({PARTITIONS * OFFSETS}) r(i)")
    query = sqlglot.transpile(f"SELECT {columns} FROM t WHERE {range_filter(ranges)}", read="spark", write="duckdb")[0]
    return con.execute(query).fetchall()


def _selected(ranges):
    return set(_query(ranges))


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.integers(0, 12), st.tuples(st.integers(0, 40), st.integers(0, 15)), min_size=1, max_size=10))
def test_the_filter_keeps_exactly_the_records_in_the_ranges(spans):
    ranges = {p: (s, s + n) for p, (s, n) in spans.items()}
    if range_filter(ranges) is None:
        assert all(s == e for s, e in ranges.values())
        return
    assert _selected(ranges) == {(p, o) for p, o in ROWS if p in ranges and ranges[p][0] <= o < ranges[p][1]}


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.integers(0, 12), st.tuples(st.integers(0, 40), st.integers(0, 15)), min_size=1, max_size=10))
def test_a_batch_position_sorts_as_partition_then_offset_and_numbers_the_batch(spans):
    ranges = {p: (s, s + n) for p, (s, n) in spans.items()}
    if range_filter(ranges) is None:
        return
    rows = _query(ranges, f"`partition`, `offset`, {batch_position(ranges)} AS position")
    by_position = [(p, o) for p, o, _pos in sorted(rows, key=lambda r: r[2])]
    assert by_position == sorted((p, o) for p, o, _pos in rows)
    assert sorted(pos for _p, _o, pos in rows) == list(range(len(rows)))


def test_ordering_keys_send_ascending_blocks_of_partitions_to_ascending_shuffle_partitions():
    for partitions, parallelism in ((range(8), 2), (range(64), 4), ([3, 9, 40], 8), ([5], 2), (range(64), 64)):
        keys, m = ordering_keys(partitions, parallelism)
        assert m == min(len(list(partitions)), parallelism)
        targets = [spark_hash_partition(keys[p], m) for p in sorted(partitions)]
        assert targets == sorted(targets) and set(targets) == set(range(m))
