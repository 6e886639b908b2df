"""The pure rules of key compaction (``log_store.cleaning``): the cleanable range, when cleaning is
due, which records survive and which files are rewritten, against a plain model of Kafka's rules."""

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from log_store.cleaning import (
    Cleaner, bare_markers, cleanable_end, dirty_ratio, due, range_files, rewrites, survivors, undated,
)
from log_store.log_files import DataFile

DAY = 86_400_000


def data_file(first, last, records=None, ts=(0, 0), size=100, cleaned_at=None, tombstones=None, shared=False):
    return DataFile(path=f"f{first}", partition=0, size=size, records=last - first + 1 if records is None else records,
                    first=first, last=last, min_timestamp_ms=ts[0], max_timestamp_ms=ts[1], cleaned_at_ms=cleaned_at,
                    tombstones=tombstones, shared=shared)


def test_the_cleanable_range_is_whole_files_old_enough_from_the_log_start():
    fs = [data_file(0, 9, ts=(0, 1_000)), data_file(10, 19, ts=(0, 2_000)), data_file(20, 29, ts=(0, 9_000)),
          data_file(30, 39, ts=(0, 1_000))]
    assert cleanable_end(fs, 0, 40, now_ms=10_000, min_lag_ms=0) == 40
    assert cleanable_end(fs, 0, 40, now_ms=10_000, min_lag_ms=5_000) == 20, "stops at the first young file"
    assert cleanable_end(fs, 5, 40, now_ms=10_000, min_lag_ms=5_000) == 20, "the file holding the log start counts"
    assert cleanable_end(fs, 20, 40, now_ms=10_000, min_lag_ms=5_000) == 20, "nothing: the log start"
    assert cleanable_end(fs, 0, 35, now_ms=10_000, min_lag_ms=0) == 30, "never past the log end"
    assert range_files(fs, 5, 20) == fs[:2]
    shared = [data_file(0, 9), data_file(10, 19, shared=True), data_file(20, 29)]
    assert cleanable_end(shared, 0, 30, now_ms=1, min_lag_ms=0) == 10, "an arrival file of several partitions ends it"
    untimed = [data_file(0, 9), DataFile(path="x", partition=0, size=1, records=10, first=10, last=19)]
    assert cleanable_end(untimed, 0, 20, now_ms=1, min_lag_ms=0) == 10, "a file without timestamps ends it"


def test_cleaning_is_due_by_dirty_ratio_max_lag_or_expired_tombstones():
    fs = [data_file(0, 9, size=300, ts=(5_000, 5_000)), data_file(10, 19, size=100, ts=(8_000, 9_000))]
    assert dirty_ratio(fs, 10) == 0.25 and dirty_ratio(fs, 0) == 1.0 and dirty_ratio(fs, 20) == 0.0
    assert due(fs, 0, 10_000, Cleaner()) == "dirty ratio"
    assert due(fs, 10, 10_000, Cleaner()) is None, "a quarter dirty: below 0.5"
    assert due(fs, 10, 10_000, Cleaner(min_dirty_ratio=0.25)) == "dirty ratio"
    assert due(fs, 10, 10_000, Cleaner(max_lag_ms=2_000)) == "max compaction lag", "a dirty record 2 s old"
    assert due(fs, 10, 10_000, Cleaner(max_lag_ms=2_001)) is None
    assert due(fs, 20, 10_000, Cleaner(min_dirty_ratio=0.0, max_lag_ms=1)) is None, "nothing dirty"
    dated = [data_file(0, 9, cleaned_at=1_000, tombstones=2), data_file(10, 19, cleaned_at=1_000, tombstones=0)]
    assert due(dated, 20, 1_000 + DAY, Cleaner()) == "tombstones past delete.retention.ms"
    assert due(dated, 20, 999 + DAY, Cleaner()) is None, "the horizon not reached"
    assert due([data_file(0, 9, cleaned_at=1_000, tombstones=0)], 20, 10 * DAY, Cleaner()) is None


# -- survivors against a model --------------------------------------------------------------------
KEYS = st.one_of(st.none(), st.sampled_from([b"a", b"b", b"c", b"d"]))


@st.composite
def partitions(draw):
    """A partition's range: files of records (offset, key, value or None), offsets rising with
    gaps, each file cleaned at some time or never, with the count of tombstones it holds."""
    offset, files, rows = draw(st.integers(0, 5)), [], []
    for i in range(draw(st.integers(1, 4))):
        first, mine = offset, []
        for _ in range(draw(st.integers(1, 6))):
            offset += draw(st.integers(1, 3))
            mine.append((offset, draw(KEYS), draw(st.one_of(st.none(), st.just(b"v")))))
        cleaned = draw(st.one_of(st.none(), st.sampled_from([0, 50, 100])))
        files.append(DataFile(path=f"f{i}", partition=0, size=10 * len(mine), records=len(mine), first=mine[0][0],
                              last=mine[-1][0], min_timestamp_ms=0, max_timestamp_ms=0, cleaned_at_ms=cleaned,
                              tombstones=None if cleaned is None else sum(v is None for _o, _k, v in mine)))
        rows.extend(mine)
        offset += draw(st.integers(0, 2))
        assert first <= mine[0][0]
    return files, rows


def model(files, rows, now_ms, retention_ms):
    """Kafka's rules record by record: the latest per key, null keys kept, tombstones until the horizon."""
    latest = {}
    for o, k, _v in rows:
        if k is not None:
            latest[k] = max(latest.get(k, -1), o)
    out = []
    for o, k, v in rows:
        f = next(f for f in files if f.first <= o <= f.last)
        expired = v is None and f.cleaned_at_ms is not None and f.cleaned_at_ms + retention_ms <= now_ms
        out.append(k is None or (latest[k] == o and not expired))
    return out


@settings(max_examples=300, deadline=None)
@given(partitions(), st.sampled_from([0, 60, 120]))
def test_survivors_are_each_keys_latest_and_undue_tombstones(found, now_ms):
    files, rows = found
    table = pa.table({"offset": pa.array([o for o, _k, _v in rows], pa.int64()),
                      "key": pa.array([k for _o, k, _v in rows], pa.binary()),
                      "value": pa.array([v for _o, _k, v in rows], pa.binary())})
    assert survivors(table, files, now_ms, 50).to_pylist() == model(files, rows, now_ms, 50)


def test_a_key_seen_once_survives_and_a_null_key_is_never_superseded():
    files = [data_file(0, 3)]
    table = pa.table({"offset": pa.array([0, 1, 2, 3], pa.int64()), "key": pa.array([b"k", None, None, b"k"]),
                      "value": pa.array([b"1", b"x", b"y", None])})
    assert survivors(table, files, 0, DAY).to_pylist() == [False, True, True, True], \
        "the tombstone is the key's latest: it stays until its file was cleaned a day ago"


def test_rewrites_take_files_losing_records_and_undated_tombstones_grouped_by_cleaning_time():
    fs = [data_file(0, 9, cleaned_at=5), data_file(10, 19, cleaned_at=5), data_file(20, 29),
          data_file(30, 39), data_file(40, 49), data_file(50, 59)]
    plan = rewrites(fs, kept=[3, 10, 10, 4, 0, 10], tombstones=[0, 0, 1, 0, 0, 0], now_ms=7, target_bytes=1_000)
    assert [([f.first for f in r.files], r.cleaned_at_ms) for r in plan] == [([0], 5), ([20, 30, 40], 7)], \
        "a cleaned file keeping all stays; an undated file keeping its tombstone is dated"
    plan = rewrites(fs, kept=[3, 1, 9, 9, 9, 9], tombstones=[0] * 6, now_ms=7, target_bytes=150)
    assert [[f.first for f in r.files] for r in plan] == [[0, 10], [20], [30], [40], [50]], \
        "survivors up to the target in a file"
    assert rewrites(fs, kept=[10] * 6, tombstones=[0] * 6, now_ms=7, target_bytes=1_000) == []


def test_a_dated_file_holding_a_marker_left_bare_is_rewritten_in_two_the_rest_keeping_its_date():
    fs = [data_file(0, 9, cleaned_at=5), data_file(10, 19, cleaned_at=5), data_file(20, 29), data_file(30, 39)]
    plan = rewrites(fs, kept=[10, 10, 10, 10], tombstones=[1, 0, 1, 0], now_ms=7, target_bytes=1_000,
                    fresh=[(4, 6), None, (25, 5), None])
    assert [([f.first for f in r.files], r.cleaned_at_ms, r.first, r.last) for r in plan] == \
        [([0], 5, 0, 3), ([0], 7, 4, 9), ([20], 7, 20, 29)], \
        "from the bare marker on, dated now; an undated file is dated whole"
    plan = rewrites(fs, kept=[10, 10, 10, 10], tombstones=[0] * 4, now_ms=7, target_bytes=1_000,
                    fresh=[(0, 10), None, None, None])
    assert [(r.cleaned_at_ms, r.first, r.last) for r in plan] == [(7, 0, 9)]


def marker_rows(rows: list[tuple[int, str, str | None]]) -> pa.Table:
    """(offset, producer, control) rows."""
    return pa.table({"offset": pa.array([r[0] for r in rows], pa.int64()), "producer_id": [r[1] for r in rows],
                     "control": [r[2] for r in rows]})


def test_a_marker_is_bare_once_no_record_of_its_producer_lies_since_its_previous_marker():
    rows = marker_rows([(0, "p", None), (1, "p", "commit"), (2, "q", None), (3, "p", None), (4, "p", "abort"),
                        (5, "p", "commit"), (6, "q", "abort"), (7, "p", None)])
    every = pa.array([True] * 8)
    assert bare_markers(rows, every).to_pylist() == [False, False, False, False, False, True, False, False], \
        "a transaction without records (5) is bare; others' records (2 before 4) do not count"
    without = pa.array([False, True, True, False, True, True, True, True])
    assert bare_markers(rows, without).to_pylist() == [False, True, False, False, True, True, False, False], \
        "the aborted transaction's marker is bare only once its record (3) is gone too"
    gone_marker = pa.array([True, False, True, False, True, True, True, True])
    assert bare_markers(rows, gone_marker).to_pylist()[4] is True, "the previous marker bounds it, kept or not"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["p", "q"]), st.sampled_from([None, "commit", "abort"]), st.booleans()),
                max_size=30))
def test_bare_markers_against_a_model(found):
    rows = marker_rows([(i, pid, c) for i, (pid, c, _k) in enumerate(found)])
    keep = [k for _p, _c, k in found]
    expected = []
    for i, (pid, c, _k) in enumerate(found):
        before = [j for j in range(i) if found[j][0] == pid and found[j][1] is not None]
        since = before[-1] + 1 if before else 0
        expected.append(c is not None and not any(found[j][0] == pid and found[j][1] is None and keep[j]
                                                  for j in range(since, i)))
    assert bare_markers(rows, pa.array(keep, pa.bool_())).to_pylist() == expected


def test_a_dated_file_holding_more_expiring_rows_than_its_tag_counts_is_undated():
    files = [data_file(0, 4, cleaned_at=5, tombstones=1), data_file(5, 9, cleaned_at=5, tombstones=1), data_file(10, 14)]
    rows = pa.table({"offset": pa.array(range(15), pa.int64())})
    dying = pa.array([i in (2, 6, 8, 12) for i in range(15)])
    assert undated(rows, files, dying).to_pylist() == [False] * 5 + [True] * 5 + [False] * 5, \
        "the second file's tag counts one; a file never dated is dated whole anyway"
