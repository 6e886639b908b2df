"""The topic controller on real Spark and Delta: rules 4-7, killed and racing controllers, bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner
from delta.tables import DeltaTable
from pyspark.sql import functions as F

from control_plane.controller import TopicController, essence, log_metadata
from log_store.crash import CRASH_ENV, CRASH_EXIT_CODE
from control_plane.records import TopicEvent
from control_plane.records import MAX_PARTITIONS
from control_plane.topics import TopicAdmin
from jobs.cli import cli
from control_plane.settings import ControllerSettings
from log_store.errors import (
    InvalidConfigurationError,
    InvalidPartitionsError,
    UnknownTopicError,
)
from log_store.partitioner import partition_for
from log_store.log_metadata import Mode
from pipelines.producer import Producer
from tests.support import PROJECT, make_records, pausing_at, resume, spawn_worker, while_paused

RW, RO, NONE = Mode.READ_WRITE, Mode.READ_ONLY, Mode.NONE
ON = ControllerSettings(delete_partition_enable=True)
WORKER = str(PROJECT / "tests" / "processes" / "controller_workers.py")


def _worker(*args: str, crash: str | None = None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV}
    if crash:
        env[CRASH_ENV] = crash
    return subprocess.Popen([sys.executable, WORKER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=PROJECT, env=env)


def _finish(procs: list[subprocess.Popen], timeout: float = 300) -> list[tuple[str, str]]:
    """Wait for racing workers; one that fails ends them all (its peers would wait at a barrier)."""
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in procs):
        if any(p.returncode not in (None, 0) for p in procs) or time.monotonic() > deadline:
            for p in procs:
                p.kill()
            break
        time.sleep(0.2)
    return [p.communicate() for p in procs]


def _history(spark, admin, topic):
    rows = admin.tables.read("topics").where(F.col("topic") == topic).orderBy("topic_version").collect()
    return [r["event"] for r in rows]


def _without_ends(meta):
    return meta.model_copy(update={"partitions": {p: pm.model_copy(update={"end_offset": None})
                                                  for p, pm in meta.partitions.items()}})


def _state(admin, topic):
    """What a run leaves behind, comparable across topics: latest record sans timestamps, log metadata."""
    record = admin.get(topic)
    rec = essence(record)
    rec.pop("topic"), rec.pop("location")
    meta = admin.log(topic).metadata().model_dump()
    meta.pop("topic")
    return rec, meta


def _parts(record):
    return {p.partition: p for p in record.partitions}


def _log_version(spark, admin, topic):
    return DeltaTable.forPath(spark, admin.get(topic).location).history(1).first()["version"]


# -- rules 4 and 5 -----------------------------------------------------------------------------
def test_expand_4_6_8_and_shrink_to_5_follow_rules_4_and_5(spark, root):
    admin = TopicAdmin(spark, root)
    admin.create("t", 4)
    ctl = TopicController(spark, root, ON)

    r = ctl.alter("t", 6)
    assert (r.previous_count, r.undeleted_partition_count, r.event, r.topic_version) == (4, 6, TopicEvent.EXPAND, 2)
    p = _parts(admin.get("t"))
    assert [p[i].leader_epoch for i in range(6)] == [1, 1, 1, 1, 0, 0]
    assert all(p[i].epoch_after_creation == {} for i in range(4))
    assert p[4].epoch_after_creation == p[5].epoch_after_creation == {0: 0, 1: 0, 2: 0, 3: 0}

    ctl.alter("t", 8)
    rec = admin.get("t")
    p = _parts(rec)
    assert [p[i].leader_epoch for i in range(8)] == [2, 2, 2, 2, 1, 1, 0, 0]
    assert p[6].epoch_after_creation == p[7].epoch_after_creation == {0: 1, 1: 1, 2: 1, 3: 1, 4: 0, 5: 0}
    assert p[4].epoch_after_creation == {0: 0, 1: 0, 2: 0, 3: 0}, "earlier maps are kept"
    assert (rec.undeleted_partition_count, rec.partition_count) == (8, 8)
    assert all(x.mode is RW for x in rec.partitions)

    r = ctl.alter("t", 5)
    assert r.event is TopicEvent.MARK_DELETION
    rec = admin.get("t")
    p = _parts(rec)
    assert (rec.undeleted_partition_count, rec.partition_count, rec.topic_version) == (5, 8, 4)
    assert [p[i].leader_epoch for i in range(8)] == [3, 3, 3, 3, 2, 1, 0, 0], "P2 < 5 bumped once, P1 kept"
    assert [p[i].mode for i in range(8)] == [RW] * 5 + [RO] * 3
    for p1 in (5, 6, 7):
        assert p[p1].epoch_before_deletion == {0: 2, 1: 2, 2: 2, 3: 2, 4: 1}
        assert p[p1].marked_for_deletion_at is not None
    assert all(p[i].epoch_before_deletion == {} and p[i].marked_for_deletion_at is None for i in range(5))
    on_log = admin.log("t").metadata()
    assert _without_ends(on_log) == log_metadata(rec), "the log carries the record's epochs, count, modes"
    assert {p: pm.end_offset for p, pm in on_log.partitions.items() if pm.end_offset is not None} == {5: 0, 6: 0, 7: 0}, \
        "a mark fixes the marked partitions' final log ends"
    assert _history(spark, admin, "t") == ["create", "expand", "expand", "mark_deletion"]
    desc = admin.describe("t")
    assert desc.partition_count == 8 and desc.undeleted_partition_count == 5
    assert [d.mode for d in desc.partitions][5:] == [RO] * 3 and desc.partitions[5].marked_for_deletion_at


# -- killed controllers ------------------------------------------------------------------------
# Killed before the record, between the steps, and after the last (the re-run must not bump
# again, must not purge twice).
CRASHES = {
    "expand": ["alter:before_record", "alter:after_record", "alter:after_apply"],
    "shrink": ["alter:before_record", "alter:after_record", "alter:after_apply"],
    "retire": ["retire:before_record", "retire:after_record", "retire:after_apply", "retire:after_purge"],
}


def _prepare(spark, root, kind, topic):
    """The state before the step under test: expand 4 -> 8, shrink 8 -> 5, retire the marked 5..7."""
    TopicAdmin(spark, root).create(topic, 4 if kind == "expand" else 8)
    if kind == "retire":
        Producer(spark, root, topic, "p").send(make_records(spark, 40, keys=40))
        TopicController(spark, root, ON).alter(topic, 5)


def _step(kind, topic, root):
    return ("tick", root, topic, "0") if kind == "retire" else ("alter", root, topic, "8" if kind == "expand" else "5")


@pytest.mark.parametrize("kind", ["expand", pytest.param("shrink", marks=pytest.mark.slow),
                                  pytest.param("retire", marks=pytest.mark.slow)])
def test_killed_controller_rerun_ends_as_an_uninterrupted_run(spark, root, kind):
    admin = TopicAdmin(spark, root)
    ctl = TopicController(spark, root, ON)
    for i, crash in enumerate(CRASHES[kind]):
        _prepare(spark, root, kind, f"c{i}")
    killed = [(f"c{i}", _worker(*_step(kind, f"c{i}", root), crash=crash)) for i, crash in enumerate(CRASHES[kind])]
    _prepare(spark, root, kind, "ref")  # the uninterrupted run, while the workers start
    if kind == "retire":
        ctl.tick("ref", 0)
    else:
        ctl.alter("ref", 8 if kind == "expand" else 5)
    reference = _state(admin, "ref")
    for (topic, proc), crash in zip(killed, CRASHES[kind]):
        _, err = proc.communicate(timeout=400)
        assert proc.returncode == CRASH_EXIT_CODE, f"{crash}: {err[-3000:]}"
        if kind == "retire":
            ctl.tick(topic, 0)
        else:
            ctl.alter(topic, 8 if kind == "expand" else 5)  # re-running the same command finishes it
        assert _state(admin, topic) == reference, f"killed at {crash}"
        assert len(_history(spark, admin, topic)) == len(_history(spark, admin, "ref")), "nothing recorded twice"
        if kind == "retire":
            assert admin.log(topic).table().where("partition >= 5").count() == 0
            assert admin.log(topic).table().count() == admin.log("ref").table().count()


# -- racing controllers ------------------------------------------------------------------------
def test_two_racing_controllers_bump_once(spark, root, tmp_path):
    admin = TopicAdmin(spark, root)
    admin.create("race", 4)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    procs = [_worker("alter", root, "race", "8", str(barrier), f"w{i}", "2") for i in range(2)]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=400)
        assert proc.returncode in (0, 1), err[-3000:]
        outs.append(json.loads(out.strip().splitlines()[-1]))
    made = [o for o in outs if o.get("event") == "expand"]
    others = [o for o in outs if o.get("event") != "expand"]
    assert len(made) == 1, outs
    other = others[0]
    assert other.get("error") == "ConcurrentTopicChangeError" or (
        other["undeleted_partition_count"] == 8 and other["note"]), other
    assert _history(spark, admin, "race") == ["create", "expand"], "one change recorded"
    rec = admin.get("race")
    assert [p.leader_epoch for p in rec.partitions] == [1, 1, 1, 1, 0, 0, 0, 0], "never two bumps"
    assert admin.log("race").metadata() == log_metadata(rec)


@pytest.mark.long
def test_topics_created_while_others_are_created_all_land_and_one_name_once(spark, root, tmp_path):
    """The topics table's compare-and-set raises a table property, which conflicts with any
    concurrent commit: a create racing other topics' creates is retried, never reported as "created concurrently";
    of two creates of one name (racing for the log table's first commit too), one wins and the
    other is told the topic exists."""
    admin = TopicAdmin(spark, root)
    admin.create("warm", 1)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    shared = [f"both-{i}" for i in range(3)]
    names = {w: [n for i in range(3) for n in (f"{w}-{i}", shared[i])] for w in ("a", "b")}
    procs = [_worker("create", root, ",".join(names[w]), "2", str(barrier), w, "2") for w in names]
    done = _finish(procs)
    assert [p.returncode for p in procs] == [0, 0], [(out, err[-3000:]) for out, err in done]
    outs = [[json.loads(line) for line in out.strip().splitlines()] for out, _ in done]
    for lines in outs:
        assert len(lines) == 6 and all(x.get("created", "").startswith(("a-", "b-")) for x in lines[0::2]), outs
    for i, name in enumerate(shared):
        results = sorted(lines[2 * i + 1].get("created", lines[2 * i + 1].get("error")) for lines in outs)
        assert results == ["TopicExistsError", name], outs
    assert sorted(admin.current()) == sorted({n for ns in names.values() for n in ns} | {"warm"})
    events = admin.tables.read("topics").groupBy("topic").count().collect()
    assert all(r["count"] == 1 for r in events), "every topic recorded once"


def test_a_topics_table_made_before_the_version_properties_keeps_its_compare_and_set(spark, root):
    """A root whose topics table has no ``lakelog.topicVersion.*`` properties (made before them)
    takes every topic's version from its rows: a version already recorded is refused, the next
    one is recorded, and from then on the table keeps the properties for every topic."""
    from log_store.engine import DeltaTransaction

    admin = TopicAdmin(spark, root)
    admin.create("old", 2)
    admin.create("other", 1)
    path = admin.tables.path("topics")
    txn = DeltaTransaction.start(spark, path)
    txn.commit_properties({}, drop=[k for k in txn.configuration() if k.startswith("lakelog.topicVersion")])
    assert not [k for k in DeltaTransaction.start(spark, path).configuration() if k.startswith("lakelog.topicVersion")]
    assert admin.record(admin.get("old")) is False, "version 1 of 'old' is in the rows: refused"
    TopicController(spark, root, ON).alter("old", 3)
    assert _history(spark, admin, "old") == ["create", "expand"]
    conf = DeltaTransaction.start(spark, path).configuration()
    assert conf["lakelog.topicVersion.old"] == "2" and conf["lakelog.topicVersion.other"] == "1"
    assert admin.record(admin.get("other")) is False, "and the others' versions were carried over"
    assert admin.tables.read("topics").count() == 3


# -- a producer through resizes ------------------------------------------------------------------
@pytest.mark.long
def test_producer_appending_through_expand_and_shrink_loses_nothing(spark, root, tmp_path):
    """Each resize commits while the producer holds a written, uncommitted batch (it waits at
    ``produce:after_write``), so its commit is fenced, and it refreshes and re-partitions."""
    admin = TopicAdmin(spark, root)
    admin.create("live", 3)
    # a batch's second pass through after_write is its retry: hit 2 is batch 2, hit 6 is batch 5
    grow, shrink = "produce:after_write@2", "produce:after_write@6"
    producer = spawn_worker("append", root, "live", "px", "0", "300", "20", "50",
                            env={**pausing_at(tmp_path, grow, shrink), "LAKELOG_WORKER_ATTACH": "1"})
    ctl = TopicController(spark, root, ON)
    assert while_paused(producer, tmp_path, grow), producer.stderr.read()[-3000:]
    ctl.alter("live", 5)  # 3 -> 5 inside the producer's transaction
    resume(tmp_path, grow)
    assert while_paused(producer, tmp_path, shrink), producer.stderr.read()[-3000:]
    ctl.alter("live", 3)  # and back: 3 and 4 are marked
    resume(tmp_path, shrink)
    out, err = producer.communicate(timeout=600)
    assert producer.returncode == 0, err[-3000:]
    lines = [json.loads(x) for x in out.splitlines()]
    rows = admin.log("live").table().select("partition", "offset", "leader_epoch", "key", "sequence").collect()
    assert sorted(r["sequence"] for r in rows) == list(range(300)), "nothing lost or duplicated"
    for p in range(5):
        mine = sorted((r["offset"], r["leader_epoch"]) for r in rows if r["partition"] == p)
        assert [o for o, _ in mine] == list(range(len(mine)))
        assert [e for _, e in mine] == sorted(e for _, e in mine), f"epochs never decrease along offsets in {p}"
    # the count a record was written under follows from its partition's epoch
    counts = {(p, 0): 3 for p in range(3)} | {(p, 1): 5 for p in range(3)} | {(p, 2): 3 for p in range(3)}
    counts |= {(3, 0): 5, (4, 0): 5}
    for r in rows:
        assert r["partition"] == partition_for(bytes(r["key"]), counts[(r["partition"], r["leader_epoch"])])
    assert [x["refreshes"] for x in lines if x["refreshes"]] == [1, 1], "fenced and refreshed at each resize"
    assert admin.log("live").metadata().undeleted_partition_count == 3


# -- retirement (rule 7) -----------------------------------------------------------------------
@pytest.mark.long
def test_retirement_after_delay_or_when_drained(spark, root):
    admin = TopicAdmin(spark, root)
    admin.create("r", 4)
    Producer(spark, root, "r", "p").send(make_records(spark, 80, keys=80))
    log = admin.log("r")
    before = {p: n for p, n in log.table().groupBy("partition").count().collect()}
    ends = log.log_end_offsets()
    assert before[2] > 0 and before[3] > 0
    ctl = TopicController(spark, root, ON)
    ctl.alter("r", 2)

    (waiting,) = ctl.tick("r", delete_delay=3600)
    assert waiting.retired == [] and set(waiting.waiting) == {2, 3} and waiting.topic_version == 2
    assert [log.metadata().partitions[p].mode for p in (2, 3)] == [RO, RO], "not retired before its delay"

    (done,) = ctl.tick("r", delete_delay=0)
    assert (done.retired, done.purged, done.topic_version) == ([2, 3], [2, 3], 3)
    rec = admin.get("r")
    assert [p.mode for p in rec.partitions] == [RW, RW, NONE, NONE] and rec.partition_count == 2
    assert all(p.retired_at and p.marked_for_deletion_at and p.epoch_before_deletion for p in rec.partitions[2:])
    assert [log.metadata().partitions[p].mode for p in (2, 3)] == [NONE, NONE]
    assert log.table().where("partition >= 2").count() == 0, "rows removed"
    assert log.table().count() == before[0] + before[1]
    assert _history(spark, admin, "r") == ["create", "mark_deletion", "retire"], "the record history stays"
    changes = spark.sql(f"SELECT * FROM table_changes_by_path('{rec.location}', 0) "
                        "WHERE _change_type = 'insert' AND partition >= 2")
    assert changes.count() == before[2] + before[3], "the change feed still returns the retired records"
    desc = {d.partition: d for d in admin.describe("r").partitions}
    assert desc[2].retired_at and desc[2].earliest_offset == desc[2].latest_offset == ends[2]

    version = _log_version(spark, admin, "r")
    (again,) = ctl.tick("r", delete_delay=0)
    assert (again.retired, again.purged, again.resumed, again.topic_version) == ([], [], False, 3)
    assert _log_version(spark, admin, "r") == version, "a re-run commits nothing"

    # growing again reuses the retired numbers: epochs and offsets continue past the old ones
    ctl.alter("r", 4)
    p = _parts(admin.get("r"))
    assert (p[2].mode, p[2].leader_epoch, p[2].epoch_after_creation, p[2].retired_at) == (RW, 1, {0: 1, 1: 1}, None)
    Producer(spark, root, "r", "p").send(make_records(spark, 40, keys=80, start=80))
    new = log.table().where("partition >= 2").collect()
    assert new and all(r["offset"] >= ends[r["partition"]] and r["leader_epoch"] == 1 for r in new)

    # a marked partition with no records is drained: retired at once, whatever the delay
    admin.create("empty", 3)
    ctl.alter("empty", 1)
    (drained,) = ctl.tick("empty", delete_delay=3600)
    assert drained.retired == [1, 2] and drained.waiting == {}


# -- bad input -----------------------------------------------------------------------------------
def _unchanged(spark, admin, topic):
    return admin.get(topic).topic_version, admin.log(topic).metadata(), _log_version(spark, admin, topic)


def test_bad_input_fails_clearly_and_changes_nothing(spark, root):
    admin = TopicAdmin(spark, root)
    admin.create("b", 4)
    off = TopicController(spark, root)
    snapshot = _unchanged(spark, admin, "b")
    with pytest.raises(UnknownTopicError, match="unknown topic 'nope'.*topics create"):
        off.alter("nope", 3)
    with pytest.raises(UnknownTopicError):
        off.tick("nope")
    with pytest.raises(InvalidPartitionsError, match="would shrink it.*to grow, pass more than 4.*delete_partition_enable"):
        off.alter("b", 2)
    for bad in (0, -1, MAX_PARTITIONS + 1):
        with pytest.raises(InvalidPartitionsError, match=f"invalid partition count {bad}.*between 1 and"):
            off.alter("b", bad)
    with pytest.raises(InvalidConfigurationError, match="delete delay -1.*>= 0"):
        off.tick("b", delete_delay=-1)
    same = off.alter("b", 4)
    assert same.event is None and "already has 4" in same.note
    assert _unchanged(spark, admin, "b") == snapshot

    on = TopicController(spark, root, ON)
    on.alter("b", 2)
    snapshot = _unchanged(spark, admin, "b")
    with pytest.raises(InvalidPartitionsError, match=r"partition\(s\) \[2, 3\] are marked.*controller tick"):
        on.alter("b", 4)
    with pytest.raises(InvalidPartitionsError, match="invalid partition count 0"):
        on.alter("b", 0)
    assert _unchanged(spark, admin, "b") == snapshot


def test_cli_alter_and_tick(spark, root, monkeypatch):
    runner = CliRunner()
    monkeypatch.delenv("LAKELOG_DELETE_PARTITION_ENABLE", raising=False)

    def run(*args, env=None):
        return runner.invoke(cli, ["--root", root, *args], env=env, catch_exceptions=False)

    assert run("topics", "create", "--topic", "c", "--partitions", "2").exit_code == 0
    res = run("topics", "alter", "--topic", "c", "--partitions", "3", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["result"]["event"] == "expand" and out["topic"]["undeleted_partition_count"] == 3
    assert [p["leader_epoch"] for p in out["topic"]["partitions"]] == [1, 1, 0]
    res = run("topics", "alter", "--topic", "c", "--partitions", "3")
    assert res.exit_code == 0 and "already has 3" in res.output and "partitions" in res.output
    version = TopicAdmin(spark, root).get("c").topic_version
    for args, expected in [
        (("topics", "alter", "--topic", "nope", "--partitions", "3"), "UnknownTopicError: unknown topic 'nope'"),
        (("topics", "alter", "--topic", "c", "--partitions", "1"), "delete_partition_enable"),
        (("topics", "alter", "--topic", "c", "--partitions", "0"), "InvalidPartitionsError: invalid partition count 0"),
        (("topics", "alter", "--topic", "c", "--partitions", str(MAX_PARTITIONS + 1)), "between 1 and"),
        (("controller", "tick", "--delete-delay", "-5"), "InvalidConfigurationError: invalid delete delay"),
        (("controller", "tick", "--topic", "nope"), "unknown topic 'nope'"),
    ]:
        res = run(*args)
        assert res.exit_code == 1 and expected in res.output, (args, res.output)
    assert TopicAdmin(spark, root).get("c").topic_version == version, "nothing changed"

    res = run("topics", "alter", "--topic", "c", "--partitions", "2", "--json",
              env={"LAKELOG_DELETE_PARTITION_ENABLE": "true"})
    assert res.exit_code == 0 and json.loads(res.stdout)["result"]["event"] == "mark_deletion", res.output
    res = run("controller", "tick", "--delete-delay", "3600", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout) == [
        {"topic": "c", "topic_version": 4, "retired": [2], "purged": [], "waiting": {}, "expired_for": {}, "resumed": False, "deleted": False,
         "log_starts": [], "compacted": [], "cleaned": [], "error": None}
    ], "an empty marked partition is drained"
    res = run("controller", "tick")
    assert res.exit_code == 0 and "controller tick" in res.output
    assert run("topics", "alter", "--topic", "c", "--partitions", "1", "--no-delete-partition-enable").exit_code == 1
