"""``groups reset-offsets`` and ``groups delete`` on real tables (control_plane.group.admin).

The promises attacked: a reset moves where the group resumes, also for a group consuming into an
exactly-once sink (which must write the replay again, not drop it as a duplicate); a dry run
writes nothing; both are refused while a member is alive; a deleted group's positions no longer
count, so a group started again with the name starts anew.
"""

from __future__ import annotations

import threading
from pathlib import Path
import time
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner

from control_plane.group.admin import GroupAdmin
from pipelines.audit import run_audit
from control_plane.group.describe import list_groups
from control_plane.group.store import GroupTables
from control_plane.group.member import GroupMember
from control_plane.group.reset import ResetTarget
from control_plane.settings import GroupSettings
from control_plane.topics import TopicAdmin
from jobs.cli import cli
from log_store.engine import table_version
from log_store.errors import InvalidConfigurationError, UnknownGroupError, UnknownTopicError
from pipelines.consumer import Consumer
from pipelines.producer import Producer
from pipelines.settings import ConsumerSettings
from tests.support import make_records

T = "resets"
FAST = GroupSettings(session_timeout_ms=3000, heartbeat_interval_ms=300)


@pytest.fixture()
def consumed(spark, root):
    """Topic ``resets`` (2 partitions, 120 records) fully consumed by group g into a sink."""
    TopicAdmin(spark, root).create(T, 2)
    Producer(spark, root, T, "p").send(make_records(spark, 120, keys=12))
    sink = f"{root}/sink"
    assert Consumer(spark, root, T, "g").run_to_sink(sink).records == 120
    return sink


def sink_rows(spark, sink: str) -> int:
    return spark.read.format("delta").load(sink).count()


def commits_version(root: str, spark) -> int:
    return table_version(spark, f"{root}/control/offset_commits")


@pytest.mark.long
def test_reset_to_earliest_replays_into_the_sink_and_dry_run_writes_nothing(spark, root, consumed):
    admin = GroupAdmin(spark, root)
    before = commits_version(root, spark)
    steps = admin.plan_reset("g", T, ResetTarget(to_earliest=True))
    assert [(s.partition, s.target) for s in steps] == [(0, 0), (1, 0)]
    assert sum(s.current for s in steps) == 120
    assert commits_version(root, spark) == before, "a plan must write nothing"

    admin.execute_reset("g", steps)
    assert Consumer(spark, root, T, "g").offsets.committed("g", T) == {0: 0, 1: 0}
    # the sink held positions 120 in all; after the reset the group delivers everything again
    assert Consumer(spark, root, T, "g").run_to_sink(consumed).records == 120
    assert sink_rows(spark, consumed) == 240
    # ... and a second run finds nothing more (the replay's own positions hold)
    assert Consumer(spark, root, T, "g").run_to_sink(consumed).records == 0
    # the audit reports the replay as repeated delivery, as docs/operating.md says
    report = run_audit(spark, root, T, consumed, str(Path(root) / "audit.md"))
    twice = next(c for c in report.checks if c.name == "sink.no_duplicates")
    assert not twice.passed and twice.violations == 120


def test_reset_of_chosen_partitions_by_shift_and_datetime(spark, root, consumed):
    admin = GroupAdmin(spark, root)
    ends = Consumer(spark, root, T, "g").offsets.committed("g", T)
    steps = admin.plan_reset("g", T, ResetTarget(shift_by=-5), "1")
    assert [(s.partition, s.current, s.target) for s in steps] == [(1, ends[1], ends[1] - 5)]
    admin.execute_reset("g", steps)
    again = Consumer(spark, root, T, "g").run_to_sink(consumed)
    assert again.records == 5 and sink_rows(spark, consumed) == 125

    future = datetime.now(timezone.utc) + timedelta(days=1)  # no record at or after it: the log ends
    assert [s.target for s in admin.plan_reset("g", T, ResetTarget(to_datetime=future))] == [ends[0], ends[1]]
    past = datetime(2000, 1, 1)
    assert [s.target for s in admin.plan_reset("g", T, ResetTarget(to_datetime=past))] == [0, 0]


def test_bad_requests_are_refused_and_write_nothing(spark, root, consumed):
    admin = GroupAdmin(spark, root)
    before = commits_version(root, spark)
    with pytest.raises(UnknownTopicError):
        admin.plan_reset("g", "nope", ResetTarget(to_earliest=True))
    with pytest.raises(InvalidConfigurationError, match=r"partitions \[5\] are not readable"):
        admin.plan_reset("g", T, ResetTarget(to_earliest=True), "0,5")
    with pytest.raises(UnknownGroupError, match="unknown group 'nobody'"):
        admin.delete("nobody")
    assert commits_version(root, spark) == before


def _heartbeating(spark, root, group: str):
    """A live member of ``group`` polling in a thread; returns (member, stop)."""
    member = GroupMember(spark, root, group, [T], FAST, member_id="live-one")
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            member.poll()
            time.sleep(0.2)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not member.owned and time.monotonic() < deadline:
        time.sleep(0.2)

    def finish() -> None:
        stop.set()
        thread.join()
        member.close()

    return member, finish


def test_reset_and_delete_are_refused_while_a_member_is_alive(spark, root, consumed):
    admin = GroupAdmin(spark, root)
    steps = admin.plan_reset("g", T, ResetTarget(to_earliest=True))
    member, finish = _heartbeating(spark, root, "g")
    try:
        assert member.owned, "the member must have joined"
        with pytest.raises(InvalidConfigurationError, match="live members \\(live-one\\)"):
            admin.execute_reset("g", steps)
        with pytest.raises(InvalidConfigurationError, match="live members"):
            admin.delete("g")
        assert Consumer(spark, root, T, "g").offsets.committed("g", T) != {0: 0, 1: 0}
    finally:
        finish()
    assert admin.live_members("g") == [], "a member that left is not live (answered at once)"
    admin.execute_reset("g", steps)
    assert Consumer(spark, root, T, "g").offsets.committed("g", T) == {0: 0, 1: 0}


@pytest.mark.slow  # waits out a session timeout; the refusal itself is in the default suite
def test_a_member_that_died_without_leaving_is_judged_dead_after_its_session(spark, root, consumed):
    admin = GroupAdmin(spark, root)
    member = GroupMember(spark, root, "g", [T], FAST, member_id="crashed")
    deadline = time.monotonic() + 60
    while not member.owned and time.monotonic() < deadline:
        member.poll()
        time.sleep(0.2)
    member.heartbeats.stop()  # its heartbeat thread ends, as in a killed process
    # no close(): its state row still says it is in the group, its heartbeat no longer moves
    started = time.monotonic()
    waits = []
    assert admin.live_members("g", waits.append) == []
    assert time.monotonic() - started >= FAST.session_timeout_ms / 1000 * 0.9 and waits


def test_deleted_group_starts_anew_and_leaves_the_list(spark, root, consumed):
    admin = GroupAdmin(spark, root)
    admin.delete("g")
    assert "g" not in [g["group"] for g in list_groups(GroupTables(spark, root))]
    assert Consumer(spark, root, T, "g").offsets.committed("g", T) == {}
    with pytest.raises(UnknownGroupError):
        admin.delete("g")
    # started again with the name, it starts from the reset policy (earliest) and writes the sink again
    assert Consumer(spark, root, T, "g", ConsumerSettings(auto_offset_reset="earliest")).run_to_sink(consumed).records == 120
    assert sink_rows(spark, consumed) == 240
    assert admin.exists("g")


def test_cli_reset_offsets_dry_run_then_execute(spark, root, consumed):
    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(cli, ["--root", root, *args], catch_exceptions=False)

    dry = invoke("groups", "reset-offsets", "--group", "g", "--topic", T, "--to-offset", "3", "--json")
    assert dry.exit_code == 0, dry.output
    assert '"executed": false' in dry.output and '"new_offset": 3' in dry.output
    assert Consumer(spark, root, T, "g").offsets.committed("g", T) != {0: 3, 1: 3}
    done = invoke("groups", "reset-offsets", "--group", "g", "--topic", T, "--to-offset", "3", "--execute")
    assert done.exit_code == 0, done.output
    assert Consumer(spark, root, T, "g").offsets.committed("g", T) == {0: 3, 1: 3}
    gone = invoke("groups", "delete", "--group", "g")
    assert gone.exit_code == 0, gone.output
    again = invoke("groups", "delete", "--group", "g")
    assert again.exit_code == 1 and "unknown group 'g'" in again.output
