"""A stream sink's rule for a micro-batch it may have landed before (``pipelines.spark.sink``):
the replay of the batch that landed last lands nothing; any other batch id lands, whatever the
producer's mark says (a restored older checkpoint plans batch ids again)."""

from __future__ import annotations

from log_store.names import producer_app_id, stream_batch_app_id
from pipelines.spark.sink import BATCH_SHIFT, batch_stamp, landed_before

P = "stream:query-1"


def versions(mark: int, stamp: int | None = None) -> dict[str, int]:
    found = {producer_app_id(P): mark}
    if stamp is not None:
        found[stream_batch_app_id(P)] = stamp
    return found


def test_the_batch_that_landed_last_is_a_replay_by_its_stamp(tmp_path):
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "7").write_text('v1\n{"batchTimestampMs":1}\n{"a":1}\n')
    stamp = batch_stamp(str(tmp_path), 7)
    assert stamp == batch_stamp(str(tmp_path), 7) and 0 <= stamp < 2**63
    assert landed_before(7, stamp, versions((7 << BATCH_SHIFT) + 99, stamp), P)


def test_a_batch_planned_again_on_a_restored_checkpoint_lands(tmp_path):
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "7").write_text('v1\n{"batchTimestampMs":1}\n{"a":1}\n')
    landed = batch_stamp(str(tmp_path), 7)
    (tmp_path / "offsets" / "7").write_text('v1\n{"batchTimestampMs":2}\n{"a":3}\n')  # planned again
    assert not landed_before(7, batch_stamp(str(tmp_path), 7), versions((7 << BATCH_SHIFT) + 99, landed), P)
    # an older batch id than the last landed: its offsets file differs, and so does the id
    (tmp_path / "offsets" / "5").write_text('v1\n{"batchTimestampMs":1}\n{"a":1}\n')
    assert not landed_before(5, batch_stamp(str(tmp_path), 5), versions((7 << BATCH_SHIFT) + 99, landed), P)


def test_without_a_stamp_only_the_batch_holding_the_mark_is_a_replay(tmp_path):
    """A log an earlier release wrote: its last batch's sequences hold the mark."""
    mark = (7 << BATCH_SHIFT) + 99
    assert landed_before(7, 1, versions(mark), P)
    assert not landed_before(5, 1, versions(mark), P), "an older batch id is planned again: it lands"
    assert not landed_before(8, 1, versions(mark), P)
    assert not landed_before(0, 1, {}, P), "a new producer"
