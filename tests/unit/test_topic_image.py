"""The topic image without Spark: one replay of a topic's records answers what each changed, what
was retired between two versions, and the resizes a consumer's gate holds for."""

from datetime import datetime

from control_plane.controller.rules import plan_expand, plan_retire, plan_shrink
from control_plane.image import TopicImage
from control_plane.records import PartitionState, TopicEvent, TopicRecord
from pipelines.gating import barriers_of

NOW = datetime(2026, 1, 1)


def life() -> list[TopicRecord]:
    """2 partitions, grow to 4, shrink to 3, retire 3, grow back to 4 (number 3 reused)."""
    rs = [TopicRecord(topic="t", topic_version=1, event=TopicEvent.CREATE, location="/x", partition_count=2,
                      undeleted_partition_count=2, partitions=[PartitionState(partition=p) for p in range(2)])]
    rs.append(plan_expand(rs[-1], 4, NOW))
    rs.append(plan_shrink(rs[-1], 3, NOW))
    rs.append(plan_retire(rs[-1], {3: 17}, NOW))
    rs.append(plan_expand(rs[-1], 4, NOW))
    return rs


def test_each_change_names_what_it_added_marked_retired_and_re_epoched():
    image = TopicImage("t", reversed(life()))  # any row order: replayed by version
    got = [(c.version, c.added, c.marked, [p.partition for p in c.retired], c.epochs) for c in image.changes()]
    assert got == [
        (1, [0, 1], [], [], {0: 0, 1: 0}),
        (2, [2, 3], [], [], {0: 1, 1: 1, 2: 0, 3: 0}),
        (3, [], [3], [], {0: 2, 1: 2, 2: 1}),
        (4, [], [], [3], {}),
        (5, [3], [], [], {0: 3, 1: 3, 2: 2, 3: 1}),
    ]


def test_versions_retirements_and_the_image_at_an_earlier_version():
    image = TopicImage("t", life())
    assert image.version == 5 and image.latest.undeleted_partition_count == 4
    assert image.record(3).event is TopicEvent.MARK_DELETION and image.record(9) is None
    assert image.retired_between(0, 5) == [(3, 0, 17)]
    assert image.retired_between(4, 5) == []
    assert image.at(3).version == 3 and image.at(3).retired_between(0, 9) == []
    assert image.ever_retired() == {3}
    assert not TopicImage("t", []) and TopicImage("t", []).version == 0


def test_where_a_plan_at_each_version_saw_each_partition_begin():
    """A group's assignment planned at a version starts an unread partition where that version's
    incarnation began (campaign seed 41): number 3 began at 0 until its retirement, at 17 after."""
    image = TopicImage("t", life())
    assert image.starts_at(2) == {0: 0, 1: 0, 2: 0, 3: 0}
    assert image.starts_at(3) == {0: 0, 1: 0, 2: 0, 3: 0}  # marked, still readable
    assert image.starts_at(4) == {0: 0, 1: 0, 2: 0}  # retired: no incarnation live
    assert image.starts_at(5)[3] == 17 and image.starts_at(99)[3] == 17
    assert image.starts_at(0) == {} and TopicImage("t", []).starts_at(3) == {}


def test_barriers_follow_the_image_and_a_retirement_prunes_the_retired_incarnation():
    image = TopicImage("t", life())
    at_shrink = barriers_of(image.at(3))
    assert [(b.version, b.before, b.marked) for b in at_shrink] == [
        (2, {0: 0, 1: 0}, []), (3, {0: 1, 1: 1, 2: 0}, [3])]
    after = barriers_of(image)
    assert [(b.version, b.before, b.marked) for b in after] == [
        (2, {0: 0, 1: 0}, []), (3, {0: 1, 1: 1, 2: 0}, []), (5, {0: 2, 1: 2, 2: 1}, [])]


def test_a_groups_view_begins_at_its_first_generation_that_saw_the_current_incarnation():
    """Versions run on across a delete and create again: a generation planned with the deleted
    topic does not start the group's view of the new one, whose retirements it never owed."""
    first = life()  # versions 1-5
    gone = first[-1].model_copy(update={"topic_version": 6, "event": TopicEvent.DELETED})
    again = TopicRecord(topic="t", topic_version=7, event=TopicEvent.CREATE, location="/y", partition_count=2,
                        undeleted_partition_count=2, partitions=[PartitionState(partition=p) for p in range(2)])
    assert TopicImage("t", first).view_start([2, 4]) == 2
    assert TopicImage("t", first).view_start([]) is None
    made_again = TopicImage("t", [*first, gone, again])
    assert made_again.view_start([1, 3, 5]) is None  # every generation planned with the deleted topic
    assert made_again.view_start([3, 7, 8]) == 7
