"""The audit's questions on DuckDB, without Spark: a key shown as Spark's CAST shows it (UTF-8
decoded), and a change feed larger than the in-process limit is left to Spark."""

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from log_store.rs_reader import FastReadUnavailable
from pipelines.audit.feeds import PRODUCED_COLUMNS, rs_change_feed
from pipelines.audit.frames import DuckFrames
from pipelines.audit.rows import log_rows


def test_a_keys_text_is_its_utf8_as_spark_decodes_it():
    frames = DuckFrames()
    log = frames.table(pa.table({
        "partition": pa.array([0, 0, 0], pa.int32()), "offset": pa.array([0, 1, 2], pa.int64()),
        "leader_epoch": pa.array([0, 0, 0], pa.int32()),
        "key": pa.array(["é".encode(), "ключ".encode(), None], pa.binary())}))
    assert [r["key"] for r in frames.rows(log_rows(frames, log))] == ["é", "ключ", None]
    frames.close()


def test_a_change_feed_past_the_limit_is_sparks(tmp_path):
    path = str(tmp_path / "log")
    rows = pa.table({"partition": pa.array([0] * 10, pa.int32()), "offset": pa.array(range(10), pa.int64()),
                     "key": pa.array([b"k"] * 10), "sequence": pa.array(range(10), pa.int64()),
                     "producer_id": pa.array(["p"] * 10)})
    write_deltalake(path, rows, configuration={"delta.enableChangeDataFeed": "true"})
    small = DuckFrames(limit=5)
    with pytest.raises(FastReadUnavailable, match="more than 5 rows"):
        rs_change_feed(small, path, None, PRODUCED_COLUMNS)
    whole = DuckFrames(limit=10)
    feed, commits = rs_change_feed(whole, path, None, PRODUCED_COLUMNS)
    assert whole.count(feed) == 10 and [c["version"] for c in commits] == [0]
    assert set(whole.columns(feed)) == {"partition", "offset", "key", "sequence", "producer_id", "_change_type",
                                        "_commit_version"}
    write_deltalake(str(tmp_path / "plain"), rows)
    with pytest.raises(FastReadUnavailable, match="no change data feed"):
        rs_change_feed(whole, str(tmp_path / "plain"), None, PRODUCED_COLUMNS)
