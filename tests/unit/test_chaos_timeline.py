"""``python -m chaos.timeline``: a kept run's story in time order (delta-rs, no Spark)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from chaos.timeline import main, timeline

PARTS = pa.list_(pa.struct([("partition", pa.int32()), ("mode", pa.string()), ("start_offset", pa.int64()),
                            ("end_offset", pa.int64())]))
TOPICS = pa.schema([("topic", pa.string()), ("topic_version", pa.int32()), ("event", pa.string()),
                    ("partitions", PARTS), ("changed_at", pa.timestamp("us")), ("changed_by", pa.string())])
COMMITS = pa.schema([("group", pa.string()), ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                     ("generation", pa.int32()), ("member_id", pa.string()), ("kind", pa.string()),
                     ("end_offset", pa.int64()), ("committed_at", pa.timestamp("us"))])


@pytest.fixture()
def run(tmp_path):
    root = tmp_path / "seed-1" / "root"
    write_deltalake(str(root / "control" / "topics"), pa.Table.from_pylist([
        dict(topic="t", topic_version=2, event="retire", changed_by="ctl", changed_at=datetime(2026, 1, 1, 10, 0, 5),
             partitions=[dict(partition=1, mode="None", start_offset=0, end_offset=52)])], TOPICS))
    write_deltalake(str(root / "control" / "offset_commits"), pa.Table.from_pylist([
        dict(group="g", topic="t", partition=p, offset=o, generation=3, member_id="m1", kind="commit", end_offset=None,
             committed_at=datetime(2026, 1, 1, 10, 0, 9)) for p, o in ((0, 28), (2, 7))], COMMITS),
        configuration={"delta.enableChangeDataFeed": "true"})
    (root.parent / "logs").mkdir()
    at = datetime(2026, 1, 1, 10, 0, 1, tzinfo=timezone.utc).timestamp()  # Unix seconds, whatever the writer's zone
    (root.parent / "logs" / "g-m1.1.out").write_text(
        json.dumps({"partitions": [0, 2], "event": "assigned", "at": at}) + "\nnot json\n")
    return root.parent


def test_events_from_every_table_and_log_in_time_order(run, capsys):
    events = timeline(run)
    assert [(e["who"], e["what"]) for e in events] == [("g-m1.1", "assigned"), ("ctl", "topic v2 retire"),
                                                       ("m1", "g commit (gen 3, v0)")]
    assert events[1]["detail"] == "p1:None[0,52)" and events[2]["detail"] == "p0:28 p2:7"
    assert main([str(run), "--json", "--grep", "commit"]) == 0
    assert [json.loads(line)["who"] for line in capsys.readouterr().out.splitlines()] == ["m1"]


def test_a_directory_that_is_not_a_run_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="not a campaign run directory"):
        main([str(tmp_path)])
