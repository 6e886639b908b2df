"""`lakelog topics timeline`: a topic that went 4 -> 6 -> 8 -> 5 partitions, drawn from its history."""

import json
from datetime import timedelta
from pathlib import Path

from click.testing import CliRunner

from control_plane.layout import RootLayout
from control_plane.records import PartitionState, TopicEvent, TopicRecord
from control_plane.tables import ControlTables
from control_plane.topics import TopicAdmin
from jobs.cli import cli
from log_store.log_metadata import Mode


def resize_history(created: TopicRecord) -> list[TopicRecord]:
    """Rows a controller would write: expand to 6, expand to 8, mark 5..7 for deletion, retire them."""
    t0 = created.changed_at
    rows, parts = [], {p.partition: p for p in created.partitions}

    def row(version: int, event: TopicEvent, count: int, undeleted: int) -> None:
        rows.append(created.model_copy(update={
            "topic_version": version, "event": event, "partition_count": count, "undeleted_partition_count": undeleted,
            "partitions": [parts[p] for p in sorted(parts)], "changed_at": t0 + timedelta(minutes=version),
        }))

    def bump(ps) -> dict[int, int]:
        before = {p: parts[p].leader_epoch for p in ps}
        for p in ps:
            parts[p] = parts[p].model_copy(update={"leader_epoch": before[p] + 1})
        return before

    for version, (old, new) in ((2, (4, 6)), (3, (6, 8))):
        before = bump(range(old))
        parts.update({q: PartitionState(partition=q, epoch_after_creation=before) for q in range(old, new)})
        row(version, TopicEvent.EXPAND, new, new)
    before = bump(range(5))
    at = t0 + timedelta(minutes=4)
    for q in (5, 6, 7):
        parts[q] = parts[q].model_copy(update={"mode": Mode.READ_ONLY, "epoch_before_deletion": before, "marked_for_deletion_at": at})
    row(4, TopicEvent.MARK_DELETION, 8, 5)
    for q in (5, 6, 7):
        parts[q] = parts[q].model_copy(update={"mode": Mode.NONE, "retired_at": at + timedelta(minutes=1)})
    row(5, TopicEvent.RETIRE, 8, 5)
    return rows


def test_timeline_of_expansions_deletion_and_retirement(spark, root, tmp_path):
    created = TopicAdmin(spark, root).create("life", 4)
    ControlTables(spark, RootLayout(root)).append("topics", [r.row() for r in resize_history(created)])
    runner = CliRunner()

    res = runner.invoke(cli, ["--root", root, "topics", "timeline", "--topic", "life", "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["path"] == f"{RootLayout(root).root}/timelines/life.png"
    png = Path(out["path"]).read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    events = out["events"]
    assert [(e["topic_version"], e["event"], e["partition_count"], e["undeleted_partition_count"]) for e in events] == [
        (1, "create", 4, 4), (2, "expand", 6, 6), (3, "expand", 8, 8), (4, "mark_deletion", 8, 5), (5, "retire", 8, 5)]
    assert [e["added"] for e in events] == [[0, 1, 2, 3], [4, 5], [6, 7], [], []]
    assert [e["marked"] for e in events] == [[], [], [], [5, 6, 7], []]
    assert [e["retired"] for e in events] == [[], [], [], [], [5, 6, 7]]
    assert events[3]["epochs"] == {"0": 3, "1": 3, "2": 3, "3": 3, "4": 2} and events[4]["epochs"] == {}

    own = tmp_path / "pics" / "life.png"
    res = runner.invoke(cli, ["--root", root, "topics", "timeline", "--topic", "life", "--output", str(own)])
    assert res.exit_code == 0 and str(own) in res.stdout.replace("\n", "") and own.read_bytes()[:4] == b"\x89PNG"
    res = runner.invoke(cli, ["--root", root, "topics", "timeline", "--topic", "nope"])
    assert res.exit_code == 1 and "unknown topic 'nope'" in res.output
