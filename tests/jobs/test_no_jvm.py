"""Commands that move no data through Spark run without a JVM on a local root: each is a real
``lakelog`` process with ``LAKELOG_NO_JVM=1``, which turns any use of Spark's session into an
error naming its caller. The second day too: a produce repeated, a topic resized, deleted and
made again."""

import json
import os
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]


def lakelog(root, *args, check=True):
    env = {**os.environ, "LAKELOG_NO_JVM": "1", "PYTHONPATH": str(PROJECT)}
    proc = subprocess.run([sys.executable, "-m", "jobs.cli", "--root", str(root), *args], capture_output=True,
                          text=True, timeout=120, cwd=PROJECT, env=env)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def records_file(tmp_path, n, name="in.jsonl"):
    lines = [json.dumps({"key": f"k{i % 7}", "value": {"n": i}, "headers": {"src": "t", "i": str(i)},
                         "timestamp": 1767225600000 + i}) for i in range(n)]
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def consumed(root, topic, group):
    out = lakelog(root, "consume", "--topic", topic, "--group", group, "--from-beginning", "--idle-timeout", "1",
                  "--json").stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_topics_produce_consume_and_groups_start_no_jvm(tmp_path):
    root = tmp_path / "root"
    lakelog(root, "topics", "create", "--topic", "t", "--partitions", "3")
    source = records_file(tmp_path, 100)
    first = json.loads(lakelog(root, "produce", "--topic", "t", "--input", source, "--producer-id", "P", "--json").stdout)
    again = json.loads(lakelog(root, "produce", "--topic", "t", "--input", source, "--producer-id", "P", "--json").stdout)
    assert (first["appended"], again["appended"], again["duplicates"]) == (100, 0, 100)
    got = consumed(root, "t", "g")
    assert len(got) == 100 and [(r["partition"], r["offset"]) for r in got] == sorted((r["partition"], r["offset"]) for r in got)
    for p in {r["partition"] for r in got}:  # per key, in the order produced
        values = [json.loads(r["value"])["n"] for r in got if r["partition"] == p]
        assert values == sorted(values)
    assert {r["key"] for r in got} == {f"k{i}" for i in range(7)} and got[0]["value"].startswith('{"n":')
    assert got[0]["timestamp"].startswith("2026-01-01 00:00:00")  # naive UTC, as Spark's rows print it
    one = lakelog(root, "consume", "--topic", "t", "--partition", "1", "--offset", "2", "--max-records", "3", "--json")
    assert [json.loads(line) for line in one.stdout.splitlines()] == [r for r in got if r["partition"] == 1][2:5]
    described = json.loads(lakelog(root, "groups", "describe", "--group", "g", "--json").stdout)
    assert sum(p["lag"] for p in described["partitions"]) == 0 and described["generation"] >= 1
    assert [g["group"] for g in json.loads(lakelog(root, "groups", "list", "--json").stdout)] == ["g"]
    lakelog(root, "groups", "reset-offsets", "--group", "g", "--topic", "t", "--to-datetime", "2026-01-01T00:00:00.030",
            "--execute")  # each partition's first offset at or after it, read with delta-rs
    assert sorted(json.loads(r["value"])["n"] for r in consumed(root, "t", "g")) == list(range(30, 100))

    lakelog(root, "topics", "alter", "--topic", "t", "--partitions", "5")
    topic = json.loads(lakelog(root, "topics", "describe", "--topic", "t", "--json").stdout)
    assert len(topic["partitions"]) == 5 and sum(p["latest_offset"] for p in topic["partitions"]) == 100
    lakelog(root, "produce", "--topic", "t", "--input", records_file(tmp_path, 10, "more.jsonl"))
    assert len(consumed(root, "t", "g")) == 10  # the group goes on from its positions after the resize

    compacted = json.loads(lakelog(root, "topics", "compact", "--topic", "t", "--json").stdout)
    assert compacted and all(c["files_after"] < c["files_before"] for c in compacted)
    again = consumed(root, "t", "fresh")
    assert len(again) == 110 and len({(r["partition"], r["offset"]) for r in again}) == 110
    lakelog(root, "topics", "alter", "--topic", "t", "--partitions", "4", "--delete-partition-enable")
    lakelog(root, "controller", "tick")
    shrunk = json.loads(lakelog(root, "topics", "describe", "--topic", "t", "--json").stdout)
    # every interested group drained partition 4: retired at once, its rows deleted (delta-rs's DELETE)
    assert [p["mode"] for p in shrunk["partitions"]][:5] == ["ReadWrite"] * 4 + ["None"]

    lakelog(root, "topics", "delete", "--topic", "t")
    lakelog(root, "topics", "create", "--topic", "t", "--partitions", "2")
    lakelog(root, "produce", "--topic", "t", "--input", records_file(tmp_path, 5, "new.jsonl"), "--producer-id", "P")
    assert len(consumed(root, "t", "g")) == 5  # the topic made again: its records only, none of the deleted one's


def test_a_bad_input_file_is_refused_by_line_without_a_jvm(tmp_path):
    root = tmp_path / "root"
    lakelog(root, "topics", "create", "--topic", "t", "--partitions", "1")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"key": "a", "value": "v"}\n\n{"key": "a"}\n{"value": "v", "timestamp": "yesterday"}\n[1]\n')
    proc = lakelog(root, "produce", "--topic", "t", "--input", str(bad), check=False)
    assert proc.returncode == 1
    assert ("line 3: record has no 'value'; line 4: bad timestamp yesterday; line 5: malformed JSON object"
            in proc.stderr), proc.stderr
    assert json.loads(lakelog(root, "topics", "describe", "--topic", "t", "--json").stdout)["partitions"][0]["latest_offset"] == 0


def test_a_command_that_needs_spark_says_so_under_no_jvm(tmp_path):
    """The negative control: the switch does stop a command that starts Spark."""
    root = tmp_path / "root"
    lakelog(root, "topics", "create", "--topic", "t", "--partitions", "1")
    proc = lakelog(root, "audit", "--topic", "t", "--engine", "spark", check=False)
    assert proc.returncode == 1 and "LAKELOG_NO_JVM=1" in proc.stderr


def test_a_replicated_topic_is_copied_resized_and_failed_over_without_a_jvm(tmp_path):
    """A copy that carries records and also changes the follower's table properties (after a
    resize, after an election) is one commit lakelog writes itself: no Spark there either."""
    root, eu, us = tmp_path / "root", str(tmp_path / "eu"), str(tmp_path / "us")
    lakelog(root, "topics", "create", "--topic", "r", "--partitions", "2", "--replicas", f"{eu},{us}")
    lakelog(root, "produce", "--topic", "r", "--input", records_file(tmp_path, 40))
    lakelog(root, "replicate", "--topic", "r")
    lakelog(root, "topics", "alter", "--topic", "r", "--partitions", "3")
    lakelog(root, "produce", "--topic", "r", "--input", records_file(tmp_path, 30, "more.jsonl"))
    lakelog(root, "replicate", "--topic", "r")  # the resize's metadata with the new records, if not copied yet
    lakelog(root, "topics", "elect-leader", "--topic", "r", "--leader", us)
    lakelog(root, "produce", "--topic", "r", "--input", records_file(tmp_path, 5, "after.jsonl"))
    lakelog(root, "replicate", "--topic", "r")
    topic = json.loads(lakelog(root, "topics", "describe", "--topic", "r", "--json").stdout)
    assert len(topic["partitions"]) == 3 and sum(p["latest_offset"] for p in topic["partitions"]) == 75
    got = consumed(root, "r", "g")
    assert len(got) == 75 and len({(r["partition"], r["offset"]) for r in got}) == 75
