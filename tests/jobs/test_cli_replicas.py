"""``lakelog`` for a replicated topic, as a user types it: create with --replicas, produce,
replicate, describe (leader, epoch, replicas, in-sync set, high watermark, lag), elect-leader,
SQL over the replica history; bad input refused with exit code 1 and nothing written."""

from __future__ import annotations

import json


def replicated_orders(run, tmp_path, eu: str, us: str):
    """Topic ``orders`` at roots ``eu`` (leading) and ``us``, 30 keyed records produced; returns the
    input file (to produce again)."""
    assert run("topics", "create", "--topic", "orders", "--partitions", "2", "--replicas", f"{eu},{us}").exit_code == 0
    lines = tmp_path / "in.jsonl"
    lines.write_text("".join(json.dumps({"key": f"k{i % 5}", "value": {"n": i}}) + "\n" for i in range(30)))
    assert run("produce", "--topic", "orders", "--input", str(lines)).exit_code == 0
    return lines


def test_a_replicated_topic_through_replicate_describe_and_failover(run, tmp_path, root):
    eu, us = root, str(tmp_path / "us")
    lines = replicated_orders(run, tmp_path, eu, us)
    desc = json.loads(run("topics", "describe", "--topic", "orders", "--json").stdout)
    rep = desc["replication"]
    assert rep["leader"] == eu and rep["leader_epoch"] == 0 and rep["replicas"] == [eu, us]
    assert sum(rep["high_watermark"].values()) == 0 or rep["followers"][0]["lag"] == 30
    res = run("replicate", "--topic", "orders", "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["followers"][0]["copied"] == 30
    shown = run("topics", "describe", "--topic", "orders")
    assert "replicas (leader epoch 0" in shown.output and "partition" in shown.output
    res = run("topics", "elect-leader", "--topic", "orders", "--leader", us, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["leader"] == us and json.loads(res.stdout)["leader_epoch"] == 1
    desc = json.loads(run("topics", "describe", "--topic", "orders", "--json").stdout)
    assert desc["location"].startswith(us) and all(p["leader_epoch"] == 1 for p in desc["partitions"])
    assert run("produce", "--topic", "orders", "--input", str(lines)).exit_code == 0
    assert json.loads(run("replicate", "--topic", "orders", "--json").stdout)["followers"][0]["copied"] == 30
    q = run("sql", "SELECT replica_version, event, leader, leader_epoch FROM replica_history ORDER BY 1", "--json")
    assert [(r["event"], r["leader_epoch"]) for r in json.loads(q.stdout)] == [("create", 0), ("elect", 1)]
    q = run("sql", "SELECT event FROM topic_history WHERE topic = 'orders' ORDER BY topic_version", "--json")
    assert [r["event"] for r in json.loads(q.stdout)] == ["create", "elect_leader"]
    drawn = json.loads(run("topics", "timeline", "--topic", "orders", "--json").stdout)
    assert drawn["events"][-1]["leader"] == us and drawn["events"][-1]["epochs"] == {"0": 1, "1": 1}


def test_bad_replica_input_exits_1_with_nothing_written(run, tmp_path, root):
    us = str(tmp_path / "us")
    res = run("topics", "create", "--topic", "orders", "--partitions", "2", "--replicas", f"{root},{us},{us}/")
    assert res.exit_code == 1 and "appears twice" in res.output
    assert run("topics", "list", "--json").stdout.strip() in ("[]", "")
    assert not (tmp_path / "us").exists()
    assert run("topics", "create", "--topic", "plain", "--partitions", "1").exit_code == 0
    res = run("topics", "elect-leader", "--topic", "plain", "--leader", us)
    assert res.exit_code == 1 and "not replicated" in res.output
    res = run("replicate", "--topic", "plain")
    assert res.exit_code == 1 and "not replicated" in res.output
    assert run("topics", "create", "--topic", "orders", "--partitions", "1", "--replicas", f"{root},{us}").exit_code == 0
    res = run("topics", "elect-leader", "--topic", "orders", "--leader", str(tmp_path / "ap"))
    assert res.exit_code == 1 and "holds no replica" in res.output
    res = run("topics", "elect-leader", "--topic", "orders")
    assert res.exit_code == 1 and "--preferred" in res.output and "--leader ROOT" in res.output


def test_a_lost_leader_root_is_said_with_the_election_to_run_and_alter_writes_nothing(run, tmp_path, root):
    eu, us = root, str(tmp_path / "us")
    replicated_orders(run, tmp_path, eu, us)
    assert run("replicate", "--topic", "orders").exit_code == 0
    log = tmp_path / "root" / "topics" / "orders"
    assert log.is_dir()
    log.rename(log.with_name("orders.lost"))  # the leader's root is lost
    shown = run("topics", "describe", "--topic", "orders")
    assert shown.exit_code == 0, shown.output
    assert "(lost)" in shown.output and f"--leader {us}" in " ".join(shown.output.split())
    desc = json.loads(run("topics", "describe", "--topic", "orders", "--json").stdout)
    assert desc["leader_available"] is False and sum(desc["replication"]["followers"][0]["log_ends"].values()) == 30
    res = run("topics", "alter", "--topic", "orders", "--partitions", "3")
    assert res.exit_code == 1 and "LeaderNotAvailableError" in res.output and f"--leader {us}" in " ".join(res.output.split())
    assert run("topics", "create", "--topic", "plain", "--partitions", "1").exit_code == 0
    res = run("controller", "tick")  # a scheduled tick over every topic: the lost one skipped and said, the job fails
    assert res.exit_code == 1 and "1 topic(s) could not be ticked" in res.output and "'orders'" in res.output
    assert "plain" in res.output.split("could not be ticked")[0], "the other topic was ticked"
    history = run("sql", "SELECT event FROM topic_history WHERE topic = 'orders'", "--json")
    assert [r["event"] for r in json.loads(history.stdout)] == ["create"], "the refused alter wrote nothing"
    res = run("topics", "elect-leader", "--topic", "orders", "--partition", "1", "--leader", us, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["leader"] == us and "every partition" in json.loads(res.stdout)["note"]
    assert run("topics", "alter", "--topic", "orders", "--partitions", "3").exit_code == 0
    desc = json.loads(run("topics", "describe", "--topic", "orders", "--json").stdout)
    assert desc["location"].startswith(us) and len(desc["partitions"]) == 3


def test_a_replicated_topic_refuses_the_arrival_layout_before_anything_changes(run, tmp_path, root):
    eu, us = root, str(tmp_path / "us")
    replicated_orders(run, tmp_path, eu, us)
    res = run("topics", "alter", "--topic", "orders", "--partitions", "3", "--layout", "arrival")
    assert res.exit_code == 1 and "replicated" in res.output and "partitioned layout" in res.output
    desc = json.loads(run("topics", "describe", "--topic", "orders", "--json").stdout)
    assert desc["layout"] == "partitioned" and len(desc["partitions"]) == 2, "nothing changed, the grow included"
    assert json.loads(run("replicate", "--topic", "orders", "--json").stdout)["followers"][0]["error"] is None


def test_a_leader_back_from_an_older_copy_is_said_as_such_and_its_clean_re_election_exits_1(run, spark, tmp_path, root,
                                                                                          monkeypatch):
    """/us elected (epoch 1) and the process killed before finishing; /us's root back from an older
    copy (empty, told of epoch 0). ``describe`` says so, not that an election recorded nothing, and
    names /eu to elect; ``elect-leader --leader /us`` exits 1 with nothing recorded; ``--unclean``
    elects it."""
    import shutil

    from control_plane.replication.operations import Replication
    from pipelines.producer import Producer
    from pipelines.settings import ProducerSettings
    from tests.control_plane.test_replication_faults import elect_killed_at
    from tests.support import make_records

    eu, us = root, str(tmp_path / "us")
    assert run("topics", "create", "--topic", "orders", "--partitions", "1", "--replicas", f"{eu},{us}").exit_code == 0
    replication = Replication(spark, eu)
    us_log = replication.path(replication.state("orders"), us)
    shutil.copytree(us_log, str(tmp_path / "us-backup"))
    Producer(spark, eu, "orders", "p", ProducerSettings(acks="all")).send(make_records(spark, 4))
    elect_killed_at(monkeypatch, replication, "orders", us, "elect:after_record")
    shutil.rmtree(us_log)
    shutil.copytree(str(tmp_path / "us-backup"), us_log)
    shown = run("topics", "describe", "--topic", "orders")
    said = " ".join(shown.output.split())
    assert shown.exit_code == 0 and "recorded nothing" not in said, said
    assert "older copy" in said and f"elect-leader --topic orders --leader {eu}" in said
    res = run("topics", "elect-leader", "--topic", "orders", "--leader", us)
    said = " ".join(res.output.split())
    assert res.exit_code == 1 and "holds less than the epoch began with" in said and f"--leader {eu}" in said
    history = run("sql", "SELECT event FROM replica_history ORDER BY replica_version", "--json")
    assert [r["event"] for r in json.loads(history.stdout)] == ["create", "elect"], "the refused election recorded"
    res = run("topics", "elect-leader", "--topic", "orders", "--leader", us, "--unclean", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["leader_epoch"] == 2


def test_describe_never_shows_the_high_watermark_below_the_log_start(run, spark, tmp_path, root):
    """Retention at the leader while the in-sync follower was not copied to: the high watermark
    describe shows is the one readers get, at the log start, never below it ("latest" below
    "earliest" would be the column a Kafka user resets to)."""
    from control_plane.controller import TopicController

    eu, us = root, str(tmp_path / "us")
    replicated_orders(run, tmp_path, eu, us)  # acks 1: at the leader; the follower in sync, not copied
    controller = TopicController(spark, eu)
    controller.alter_config("orders", ["retention.bytes=0"], [])
    controller.tick("orders")  # every file of the leader's log goes: its log starts at its ends
    desc = json.loads(run("topics", "describe", "--topic", "orders", "--json").stdout)
    starts = {p["partition"]: p["earliest_offset"] for p in desc["partitions"]}
    shown = {int(p): o for p, o in desc["replication"]["high_watermark"].items()}
    assert sum(starts.values()) == 30
    assert shown == starts


def test_reset_offsets_is_refused_while_the_high_watermark_counts_a_root_never_read(run, spark, tmp_path, root,
                                                                                    monkeypatch):
    """A `groups reset-offsets` process that never read the in-sync follower, cut off now, counts it
    as holding nothing: the high watermark, Kafka's "latest" for a consumer, is not known. Every
    target clamped to it (--to-latest, --to-offset, --shift-by, --to-datetime) is refused, exit 1,
    nothing written (as a reader resolving "latest" refuses); --to-earliest goes on; once the root is
    read, --to-latest moves the group to the high watermark."""
    from control_plane.group.offsets import GroupOffsets
    from control_plane.replication import reads
    from control_plane.replication.operations import Replication
    from tests.control_plane.test_replication import cut, restore

    eu, us = root, str(tmp_path / "us")
    lines = replicated_orders(run, tmp_path, eu, us)
    assert run("replicate", "--topic", "orders").exit_code == 0  # /us holds all 30, in sync
    assert run("produce", "--topic", "orders", "--input", str(lines)).exit_code == 0  # 30 more at /eu alone (acks 1)
    replication = Replication(spark, eu)
    follower = replication.path(replication.state("orders"), us)
    cut(follower)
    monkeypatch.setattr(reads, "_KNOWN", {})  # this process never read the follower's log
    try:
        for target in (["--to-latest"], ["--to-offset", "3"], ["--shift-by", "2"], ["--to-datetime", "2000-01-01"]):
            res = run("groups", "reset-offsets", "--group", "g", "--topic", "orders", *target, "--execute")
            said = " ".join(res.output.split())
            assert res.exit_code == 1, (target, res.output)
            assert "LeaderNotAvailableError" in said and f"in-sync root {us} cannot be read" in said, said
        assert GroupOffsets(spark, eu).committed("g", "orders") == {}, "nothing written"
        res = run("groups", "reset-offsets", "--group", "g", "--topic", "orders", "--to-earliest", "--json")
        assert res.exit_code == 0 and all(r["new_offset"] == 0 for r in json.loads(res.stdout)["partitions"])
    finally:
        restore(follower)
    res = run("groups", "reset-offsets", "--group", "g", "--topic", "orders", "--to-latest", "--execute", "--json")
    assert res.exit_code == 0, res.output
    assert sum(r["new_offset"] for r in json.loads(res.stdout)["partitions"]) == 30, "the high watermark, not 60"
