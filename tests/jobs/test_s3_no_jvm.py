"""Commands that move no data through Spark run without a JVM on an S3 root too, as on a local one
(tests/jobs/test_no_jvm.py): each is a real ``lakelog`` process with ``LAKELOG_NO_JVM=1``, the
root in the S3 emulator, S3A's settings in the configuration file's ``spark.conf`` and nothing in
the environment. delta-rs commits and reads with the storage options those settings give, taken
without starting the session. ``make test-s3``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.jobs.test_no_jvm import records_file
from tests.support import PROJECT

pytestmark = pytest.mark.s3


@pytest.fixture
def conf(s3, tmp_path, request) -> tuple[Path, str]:
    """A configuration file for a root in a bucket of the test's own, and that bucket."""
    bucket = s3.create_bucket(f"nojvm-{request.node.name[5:30].replace('_', '-')}")
    path = tmp_path / "s3.yaml"
    path.write_text(yaml.safe_dump({
        "root": f"s3a://{bucket}/lakelog",
        "spark": {"mode": "local", "master": "local[1]", "conf": s3.spark_conf()},
    }))
    return path, bucket


def lakelog(conf: tuple[Path, str], *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}  # S3 is configured for Spark only
    env |= {"LAKELOG_NO_JVM": "1", "PYTHONPATH": str(PROJECT)}
    proc = subprocess.run([sys.executable, "-m", "jobs.cli", "--conf", str(conf[0]), *args], capture_output=True,
                          text=True, timeout=300, cwd=PROJECT, env=env)
    if check:
        assert proc.returncode == 0, f"lakelog {' '.join(args)}:\n{proc.stderr[-3000:]}"
    return proc


def as_json(conf, *args: str):
    return json.loads(lakelog(conf, *args, "--json").stdout)


def consumed(conf, topic: str, group: str) -> list[dict]:
    out = lakelog(conf, "consume", "--topic", topic, "--group", group, "--from-beginning", "--idle-timeout", "1",
                  "--json").stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_topics_produce_consume_groups_compaction_and_sql_start_no_jvm_on_s3(conf, tmp_path):
    lakelog(conf, "topics", "create", "--topic", "t", "--partitions", "3")
    source = records_file(tmp_path, 60)
    first = as_json(conf, "produce", "--topic", "t", "--input", source, "--producer-id", "P")
    again = as_json(conf, "produce", "--topic", "t", "--input", source, "--producer-id", "P")
    assert (first["appended"], again["appended"], again["duplicates"]) == (60, 0, 60)
    got = consumed(conf, "t", "g")
    assert len(got) == 60 and len({(r["partition"], r["offset"]) for r in got}) == 60
    for p in {r["partition"] for r in got}:  # per key, in the order produced
        values = [json.loads(r["value"])["n"] for r in got if r["partition"] == p]
        assert values == sorted(values)
    one = lakelog(conf, "consume", "--topic", "t", "--partition", "1", "--offset", "2", "--max-records", "3", "--json")
    assert [json.loads(line) for line in one.stdout.splitlines()] == [r for r in got if r["partition"] == 1][2:5]
    described = as_json(conf, "groups", "describe", "--group", "g")
    assert sum(p["lag"] for p in described["partitions"]) == 0 and described["generation"] >= 1
    assert [g["group"] for g in as_json(conf, "groups", "list")] == ["g"]
    assert [t["topic"] for t in as_json(conf, "topics", "list")] == ["t"]
    assert as_json(conf, "sql", "SELECT count(*) AS n FROM log_t") == [{"n": 60}]
    lakelog(conf, "groups", "reset-offsets", "--group", "g", "--topic", "t", "--to-datetime",
            "2026-01-01T00:00:00.030", "--execute")  # each partition's first offset at or after it (delta-rs's query)
    assert sorted(json.loads(r["value"])["n"] for r in consumed(conf, "t", "g")) == list(range(30, 60))

    lakelog(conf, "topics", "alter", "--topic", "t", "--partitions", "4")
    topic = as_json(conf, "topics", "describe", "--topic", "t")
    assert len(topic["partitions"]) == 4 and sum(p["latest_offset"] for p in topic["partitions"]) == 60
    lakelog(conf, "produce", "--topic", "t", "--input", records_file(tmp_path, 10, "more.jsonl"))
    assert len(consumed(conf, "t", "g")) == 10  # the group goes on from its positions after the resize
    compacted = as_json(conf, "topics", "compact", "--topic", "t")
    assert compacted and all(c["files_after"] < c["files_before"] for c in compacted)
    lakelog(conf, "topics", "delete-records", "--topic", "t", "--partition", "0", "--before-offset", "2")
    assert as_json(conf, "topics", "describe", "--topic", "t")["partitions"][0]["earliest_offset"] == 2
    lakelog(conf, "topics", "alter", "--topic", "t", "--config", "cleanup.policy=compact")
    keyed = as_json(conf, "topics", "compact", "--topic", "t", "--keys")  # 7 keys: one record of each kept
    assert keyed and all(k["records_after"] < k["records_before"] for k in keyed)
    fresh = consumed(conf, "t", "fresh")
    assert {r["key"] for r in fresh} == {f"k{i}" for i in range(7)} and len(fresh) <= 4 * 7
    assert as_json(conf, "topics", "timeline", "--topic", "t")
    lakelog(conf, "groups", "delete", "--group", "fresh")
    assert [g["group"] for g in as_json(conf, "groups", "list")] == ["g"]

    lakelog(conf, "topics", "alter", "--topic", "t", "--partitions", "3", "--delete-partition-enable")
    lakelog(conf, "controller", "tick")
    lakelog(conf, "topics", "delete", "--topic", "t")
    lakelog(conf, "topics", "create", "--topic", "t", "--partitions", "2")
    lakelog(conf, "produce", "--topic", "t", "--input", records_file(tmp_path, 5, "new.jsonl"), "--producer-id", "P")
    assert len(consumed(conf, "t", "g")) == 5  # the topic made again: its records only


def test_a_replicated_topic_on_s3_is_copied_and_failed_over_without_a_jvm(conf, tmp_path):
    _path, bucket = conf
    eu, us = f"s3a://{bucket}/eu", f"s3a://{bucket}/us"
    lakelog(conf, "topics", "create", "--topic", "r", "--partitions", "2", "--replicas", f"{eu},{us}")
    lakelog(conf, "produce", "--topic", "r", "--input", records_file(tmp_path, 40))
    lakelog(conf, "replicate", "--topic", "r")
    lakelog(conf, "topics", "elect-leader", "--topic", "r", "--leader", us)
    lakelog(conf, "produce", "--topic", "r", "--input", records_file(tmp_path, 5, "after.jsonl"))
    report = as_json(conf, "replicate", "--topic", "r")
    assert report["leader"] == us and [f["error"] for f in report["followers"]] == [None]
    got = consumed(conf, "r", "g")
    assert len(got) == 45 and len({(r["partition"], r["offset"]) for r in got}) == 45


def test_a_command_that_needs_spark_says_so_under_no_jvm_on_s3(conf, tmp_path):
    """The audit of a small log on S3 runs without a JVM (DuckDB on delta-rs's reads), and the
    negative control: the switch does stop a command that starts Spark on S3 too."""
    lakelog(conf, "topics", "create", "--topic", "t", "--partitions", "2")
    lakelog(conf, "produce", "--topic", "t", "--input", records_file(tmp_path, 30))
    report = as_json(conf, "audit", "--topic", "t")
    assert report["passed"] and report["engine"] == "duckdb" and all(c["checked"] == 30 for c in report["checks"])
    proc = lakelog(conf, "audit", "--topic", "t", "--engine", "spark", check=False)
    assert proc.returncode == 1 and "LAKELOG_NO_JVM=1" in proc.stderr
