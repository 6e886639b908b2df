"""``format("lakelog")`` at ``kafka.isolation.level=read_committed`` with a ``startingOffsets``
between a partition's last stable offset and its log end: nothing there is lost, only not
committed yet. A stream waits there, as a Kafka consumer's position does, and delivers the
records from that offset once they are committed; a batch read, which ends at the last stable
offset at most, refuses the start after its end, as Spark's Kafka batch read does."""

from __future__ import annotations

import json

import pytest

from tests.pipelines.test_txn_format_lakelog import LEVEL, interleaved, read, stream

# ``interleaved``: partition 0 holds an open transaction from offset 8 (its last stable offset)
# and a plain record at 9 (its log end: 10); partition 1 is stable at its end, 3.
START = json.dumps({"t": {"0": 9, "1": -2}})
PARTITION_1 = [(1, 0, "co2"), (1, 2, "p2")]


def test_a_read_committed_stream_started_in_an_open_transaction_waits_there(lakelog, root, tmp_path):
    """Started at 9 (past the last stable offset 8): partition 1 is read at once; partition 0's
    records from 9 come once the transaction at 8 is committed, without the aborted one at 10
    nor anything below the start."""
    tx = interleaved(lakelog, root)
    tx.send("ab2", 0, ["x0"], epoch=0)  # offset 10
    ck, seen = str(tmp_path / "ck"), []
    options = {LEVEL: "read_committed", "startingOffsets": START, "maxOffsetsPerTrigger": "2"}
    stream(lakelog, ck, seen, **options)
    assert sorted(r for b in seen for r in b) == PARTITION_1
    assert tx.end("ab2", 0, False, [0]) == {0: 11}
    first = len(seen)
    stream(lakelog, ck, seen, **options)
    assert seen[first:] == [], "still below the open transaction's first offset: nothing of partition 0"
    tx.send("open", 0, ["op1"], epoch=0)  # offset 12
    assert tx.end("open", 0, True, [0]) == {0: 13}
    stream(lakelog, ck, seen, **options)
    assert sorted(r for b in seen[first:] for r in b) == [(0, 9, "p1"), (0, 12, "op1")]


def test_a_read_committed_batch_read_started_in_an_open_transaction_is_refused_clearly(lakelog, root):
    interleaved(lakelog, root)
    for fail in ("true", "false"):  # not data loss: refused whatever failOnDataLoss says
        with pytest.raises(Exception, match="partition 0: startingOffsets 9 is past the last stable offset 8 "
                                            r"\(kafka.isolation.level=read_committed; offsets 8-9 hold a transaction"):
            read(lakelog, **{LEVEL: "read_committed", "startingOffsets": START, "failOnDataLoss": fail}).collect()
    # an end at the start: an empty range there, and the other partitions read
    ends = json.dumps({"t": {"0": 9, "1": -1}})
    found = read(lakelog, **{LEVEL: "read_committed", "startingOffsets": START, "endingOffsets": ends}).collect()
    assert sorted((r["partition"], r["offset"], bytes(r["value"]).decode()) for r in found) == PARTITION_1
    # past the log end itself: still data loss, as before
    with pytest.raises(Exception, match="starting offset 11 is outside the log"):
        read(lakelog, **{LEVEL: "read_committed", "startingOffsets": json.dumps({"t": {"0": 11, "1": -2}})}).collect()
