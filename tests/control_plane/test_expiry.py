"""Records a deletion delay retires before a group reads them are expired, never silently
skipped: the group reports how many, which partition and offsets; ``groups
describe`` shows them; the audit counts them as expired. And a group that has not read a marked
partition yet, even one that joined after the mark, holds its retirement until the delay."""

from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from control_plane.controller import TopicController
from control_plane.group.describe import describe_group
from control_plane.group.store import GroupTables
from control_plane.group.member import GroupMember
from control_plane.records import ExpiredRange, TopicPartition
from control_plane.topics import TopicAdmin
from jobs.cli import cli
from control_plane.settings import ControllerSettings, GroupSettings
from pipelines.settings import ConsumerSettings
from pipelines.audit import run_audit
from pipelines.consumer import Consumer
from pipelines.group_consumer import GroupConsumer
from pipelines.producer import Producer
from tests.support import make_records

T = "exp"
ON = ControllerSettings(delete_partition_enable=True)
FAST = GroupSettings(session_timeout_ms=6000, heartbeat_interval_ms=500)


def setup(spark, root):
    TopicAdmin(spark, root).create(T, 3)
    Producer(spark, root, T, "p").send(make_records(spark, 120, keys=30))
    return TopicController(spark, root, ON)


@pytest.mark.long
def test_a_group_without_commits_holds_retirement_until_the_delay(spark, root):
    ctl = setup(spark, root)
    Consumer(spark, root, T, "reader").run_to_sink(f"{root}/reader")  # one group read everything
    ctl.alter(T, 2)
    member = GroupMember(spark, root, "newcomer", [T], FAST)  # joined after the mark, nothing committed
    member.poll()
    member.close()
    (tick,) = ctl.tick(T, delete_delay=3600)
    assert tick.retired == [] and set(tick.waiting) == {2}, "newcomer has not read partition 2"
    (tick,) = ctl.tick(T, delete_delay=0)
    assert tick.retired == [2]


@pytest.mark.slow  # 100 s; the default suite attacks expiry with the two tests below
def test_a_lagging_group_reports_what_the_delay_expired(spark, root):
    ctl = setup(spark, root)
    sink = f"{root}/sink"
    first = GroupConsumer(spark, root, T, "lag", ConsumerSettings(max_records_per_batch=30), FAST)
    assert first.run(sink_path=sink, max_records=30).records == 30
    log = TopicAdmin(spark, root).log(T)
    end = log.log_end_offsets()[2]
    read = first.consumer.offsets.committed("lag", T).get(2, 0)
    assert read < end
    ctl.alter(T, 2)
    (tick,) = ctl.tick(T, delete_delay=0)  # the delay is up: retired with records "lag" has not read
    assert tick.retired == [2]
    again = GroupConsumer(spark, root, T, "lag", ConsumerSettings(max_records_per_batch=200), FAST)
    result = again.run(sink_path=sink, idle_timeout_s=1)
    assert result.expired == end - read and result.records == 120 - 30 - (end - read)
    assert describe_group(GroupTables(spark, root), "lag").expired == [ExpiredRange(topic=T, partition=2, first=read, end=end)]
    out = CliRunner().invoke(cli, ["--root", root, "groups", "describe", "--group", "lag", "--json"])
    assert json.loads(out.stdout)["expired"] == [{"topic": T, "partition": 2, "first": read, "end": end}]
    report = run_audit(spark, root, T, sink)
    missing = next(c for c in report.checks if c.name == "sink.nothing_missing")
    assert report.passed and missing.groups == {"expired (reported)": end - read}, report.model_dump_json()[:3000]


@pytest.mark.long
def test_a_standalone_consumer_reports_expiry_too(spark, root):
    ctl = setup(spark, root)
    sink = f"{root}/solo"
    assert Consumer(spark, root, T, "solo", ConsumerSettings(max_records_per_batch=30)).run_to_sink(sink, 30).records == 30
    ctl.alter(T, 2)
    ctl.tick(T, delete_delay=0)
    result = Consumer(spark, root, T, "solo").run_to_sink(sink)
    assert result.expired > 0 and result.records + result.expired == 90
    assert run_audit(spark, root, T, sink).passed


@pytest.mark.long
def test_a_standalone_consumer_reports_expiry_of_a_number_grown_back(spark, root):
    """Retired and grown back before the consumer resumes: the number is readable again, and
    the retired incarnation's unread records are in the topic's history only."""
    ctl = setup(spark, root)
    sink = f"{root}/solo"
    assert Consumer(spark, root, T, "solo", ConsumerSettings(max_records_per_batch=30)).run_to_sink(sink, 30).records == 30
    ctl.alter(T, 2)
    ctl.tick(T, delete_delay=0)
    ctl.alter(T, 3)  # number 2 again, a new incarnation
    result = Consumer(spark, root, T, "solo").run_to_sink(sink)
    assert result.expired > 0 and result.records + result.expired == 90
    assert run_audit(spark, root, T, sink).passed


@pytest.mark.slow  # 26 s; the default suite keeps test_a_group_below_the_log_start_reports_the_records_expired_and_moves_up
def test_a_member_keeping_a_number_grown_back_reports_its_retired_records(spark, root):
    """Campaign seed 18: a cooperative member owned a marked partition; it was retired and its
    number grown back before the next generation, which the member kept. It must report the
    retired incarnation's records it had not delivered (no one else will: the leader leaves an
    owned partition's report to its owner)."""
    ctl = setup(spark, root)
    sink = f"{root}/coop"
    coop = GroupSettings(session_timeout_ms=6000, heartbeat_interval_ms=500, protocol="cooperative",
                         assignor="cooperative-sticky")
    member = GroupConsumer(spark, root, T, "coop", ConsumerSettings(max_records_per_batch=15), coop)
    phase = {"marked_in": None, "done": False}
    deadline = time.monotonic() + 240  # a member that never settles fails instead of hanging

    def shrink_after_first_batch(_ranges, _delivered):
        if phase["marked_in"] is None:
            ctl.alter(T, 2)
            phase["marked_in"] = member.member.generation

    def retire_and_grow_once_the_mark_is_adopted():
        m = member.member
        adopted = m.last_generation is not None and m.generation == m.last_generation.generation
        if not phase["done"] and phase["marked_in"] is not None and adopted and m.last_generation.marked:
            assert TopicPartition(topic=T, partition=2) in m.owned, "the member owns the marked partition"
            ctl.tick(T, delete_delay=0)
            ctl.alter(T, 3)
            phase["done"] = True
        return time.monotonic() > deadline

    result = member.run(sink_path=sink, idle_timeout_s=1, on_batch=shrink_after_first_batch,
                        stop=retire_and_grow_once_the_mark_is_adopted)
    assert phase["done"] and time.monotonic() < deadline, "the member settled and left on its own"
    assert result.expired > 0 and result.records + result.expired == 120
    assert [r.partition for r in describe_group(GroupTables(spark, root), "coop").expired] == [2]
    assert run_audit(spark, root, T, sink).passed


@pytest.mark.long
def test_a_leader_reports_what_a_dead_owner_of_a_retired_partition_never_revoked(spark, root, monkeypatch):
    """Campaign seed 94: a cooperative member owned a marked partition; the partition was retired,
    the member led the generation that drops it and died before adopting it (so before revoking
    and reporting). The next leader must report the records nobody delivered: the owner who
    would have is gone, and the generation before already stood at the retirement."""
    ctl = setup(spark, root)
    end = TopicAdmin(spark, root).log(T).log_end_offsets()[2]
    ctl.alter(T, 2)
    coop = GroupSettings(session_timeout_ms=3000, heartbeat_interval_ms=500, protocol="cooperative",
                         assignor="cooperative-sticky")
    first = GroupMember(spark, root, "coop", [T], coop, member_id="m1")
    deadline = time.monotonic() + 120
    while TopicPartition(topic=T, partition=2) not in first.owned:
        first.poll()
        assert time.monotonic() < deadline, "the first member never owned the marked partition"
    (tick,) = ctl.tick(T, delete_delay=0)
    assert tick.retired == [2]
    time.sleep(0.6)  # past the heartbeat interval: the member looks at the partition lists again
    before = first.generation
    # A leader adopts its generation in the poll that proposes it; it dies in between
    # (the campaign's group:after_propose), so it never adopts.
    monkeypatch.setattr(first, "_adopt", lambda *_args: None)
    first.poll()  # leads the generation without partition 2 ...
    tables = GroupTables(spark, root)
    assert tables.generation("coop").generation > before and first.generation == before
    first.heartbeats.stop()  # ... and dies before adopting it
    second = GroupMember(spark, root, "coop", [T], coop, member_id="m2")
    def settled_without_first() -> bool:
        gen = tables.generation("coop")
        return gen.member_ids() == {"m2"} and second.generation == gen.generation

    while not settled_without_first():
        second.poll()
        assert time.monotonic() < deadline, "the second member never settled in a generation without m1"
    second.close()
    assert describe_group(tables, "coop").expired == [ExpiredRange(topic=T, partition=2, first=0, end=end)]


def test_a_partition_retired_after_its_assignment_resumes_at_the_groups_position(spark, root):
    """Campaign seed 557: a member was assigned a partition the controller retired before the
    member read its positions; the partition is no longer readable, so its start was taken as 0,
    and the member reported the records it had delivered as expired and moved its position back
    from 34 to 0. An owned partition that is no longer readable resumes at the committed position."""
    ctl = setup(spark, root)
    consumer = Consumer(spark, root, T, "g", ConsumerSettings(max_records_per_batch=1000))
    consumer.run_to_sink(f"{root}/sink", 1000)
    read = consumer.offsets.committed("g", T)
    ctl.alter(T, 2)
    ctl.tick(T, delete_delay=0)
    again = Consumer(spark, root, T, "g")
    assert 2 not in again.positions(f"{root}/sink"), "retired: not readable"
    assert again.positions(f"{root}/sink", owned=[0, 1, 2])[2] == read[2] > 0
