"""``topics delete`` (control_plane.controller.deletion) on real tables, and in killed processes.

Promises attacked: a deleted topic's producers and consumers are fenced with a clear error, even
ones built before the deletion; its records and files are gone while its history stays; a
deletion killed at any step is finished by running it again or by ``controller tick``; a topic
created again with the name is a new one: a new topic id, and no group position or sink position
of the old one is used for it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from control_plane.controller import TopicController
from control_plane.records import TopicEvent
from control_plane.topics import TopicAdmin
from jobs.cli import cli
from log_store.crash import CRASH_EXIT_CODE
from log_store.errors import TopicDeletedError, TopicExistsError, UnknownTopicError
from pipelines.consumer import Consumer
from pipelines.producer import Producer
from tests.control_plane.test_controller import _worker
from tests.support import make_records

T = "doomed"


def data_files(location: str) -> list[Path]:
    return [p for p in Path(location).rglob("*.parquet")]


@pytest.fixture()
def consumed(spark, root):
    """``doomed`` with 90 records in 3 partitions, all consumed by group g into a sink."""
    TopicAdmin(spark, root).create(T, 3)
    Producer(spark, root, T, "p").send(make_records(spark, 90, keys=9))
    sink = f"{root}/sink"
    assert Consumer(spark, root, T, "g").run_to_sink(sink).records == 90
    return sink


def test_delete_fences_removes_data_keeps_history(spark, root, consumed):
    admin = TopicAdmin(spark, root)
    old = admin.get(T)
    old_id = admin.describe(T).topic_id
    producer = Producer(spark, root, T, "p-early")  # built before the deletion
    consumer = Consumer(spark, root, T, "g-early")

    done = TopicController(spark, root).delete(T)
    assert done.event is TopicEvent.DELETED
    assert [r.event for r in admin.image(T).history][-2:] == [TopicEvent.DELETING, TopicEvent.DELETED]
    assert data_files(old.location) == [], "a deleted topic's files are removed"
    with pytest.raises(TopicDeletedError, match="was deleted"):
        producer.send(make_records(spark, 5))
    with pytest.raises(TopicDeletedError, match="was deleted"):
        consumer.run_to_sink(f"{root}/other-sink")
    with pytest.raises(TopicDeletedError, match="was deleted"):
        Producer(spark, root, T, "p-late")
    with pytest.raises(TopicDeletedError):
        admin.describe(T)
    assert T not in [r.topic for r in admin.list()]
    with pytest.raises(UnknownTopicError, match="already deleted"):
        TopicController(spark, root).delete(T)

    # created again: a new topic, its own table and id; group g's old positions do not count
    admin.create(T, 2)
    assert admin.get(T).location != old.location and admin.describe(T).topic_id != old_id
    Producer(spark, root, T, "p").send(make_records(spark, 40, keys=9))  # same producer id: a new sequence space
    assert Consumer(spark, root, T, "g").offsets.committed("g", T) == {}
    again = Consumer(spark, root, T, "g").run_to_sink(consumed)  # the same sink: its old positions do not count
    assert again.records == 40
    assert spark.read.format("delta").load(consumed).count() == 130
    assert len(admin.image(T).records) == 1, "the new topic's image starts at its creation"


def test_bad_requests(spark, root):
    controller = TopicController(spark, root)
    with pytest.raises(UnknownTopicError, match="unknown topic 'never'"):
        controller.delete("never")
    TopicAdmin(spark, root).create(T, 1)
    with pytest.raises(TopicExistsError):
        TopicAdmin(spark, root).create(T, 1)


@pytest.mark.parametrize("point, finish", [
    ("delete:after_fence", "tick"),
    pytest.param("delete:after_mark", "delete", marks=pytest.mark.slow),
    pytest.param("delete:after_purge", "tick", marks=pytest.mark.slow),
])
def test_a_deletion_killed_halfway_is_finished(spark, root, consumed, point, finish):
    admin = TopicAdmin(spark, root)
    location = admin.get(T).location
    proc = _worker("delete", root, T, crash=point)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == CRASH_EXIT_CODE, err[-3000:]
    with pytest.raises(TopicDeletedError, match="is being deleted"):
        Producer(spark, root, T, "p2")
    with pytest.raises(TopicExistsError, match="is being deleted"):
        admin.create(T, 1)
    if finish == "tick":
        assert [r.deleted for r in TopicController(spark, root).tick()] == [True]
    else:
        TopicController(spark, root).delete(T)
    assert admin.image(T).latest.event is TopicEvent.DELETED
    assert data_files(location) == []
    assert TopicController(spark, root).tick() == [], "nothing left to do for a deleted topic"


def test_cli_delete_and_produce_to_a_deleted_topic(spark, root, tmp_path):
    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(cli, ["--root", root, *args], catch_exceptions=False)

    assert invoke("topics", "create", "--topic", T, "--partitions", "2").exit_code == 0
    gone = invoke("topics", "delete", "--topic", T, "--json")
    assert gone.exit_code == 0 and '"deleted": true' in gone.output
    lines = tmp_path / "in.jsonl"
    lines.write_text('{"key": "a", "value": "1"}\n')
    refused = invoke("produce", "--topic", T, "--input", str(lines))
    assert refused.exit_code == 1 and "was deleted" in refused.output
    twice = invoke("topics", "delete", "--topic", T)
    assert twice.exit_code == 1 and "already deleted" in twice.output
