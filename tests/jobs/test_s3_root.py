"""A root on S3 end to end, against the S3 emulator (tests/s3_emulator.py): the CLI in processes
of its own (topic creation, two racing producers, a group of two members across a grow and a
shrink, the controller's tick, the audit), resizes and ``format("lakelog")`` reads, writes and
the ``group`` option in the test's session, every commit through lakelog's log store on S3.
Configured as a user would: S3A's settings in the configuration file's ``spark.conf`` (or the
session's Hadoop settings), nothing in the environment. Records are checked with delta-rs, not
with lakelog. ``make test-s3``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml
from deltalake import DeltaTable

from tests.support import PROJECT

pytestmark = pytest.mark.s3
T = "orders"


def cli(conf: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = spawn(conf, *args)
    out, err = proc.communicate(timeout=600)
    if check:
        assert proc.returncode == 0, f"lakelog {' '.join(args)} failed ({proc.returncode}):\n{err[-3000:]}"
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def spawn(conf: Path, *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}  # S3 is configured for Spark only
    return subprocess.Popen([sys.executable, "-m", "jobs.cli", "--conf", str(conf), *args], cwd=PROJECT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def records_file(folder: Path, name: str, producer: str, n: int, keys: int = 20) -> str:
    path = folder / name
    path.write_text("".join(json.dumps({"key": f"k{i % keys}", "value": {"p": producer, "n": i}}) + "\n"
                            for i in range(n)))
    return str(path)


@pytest.fixture(scope="module")
def bucket(s3):
    return s3.create_bucket("lakelog-e2e")


@pytest.fixture(scope="module")
def conf(s3, bucket, tmp_path_factory) -> Path:
    """The configuration file a user writes for a root on S3."""
    path = tmp_path_factory.mktemp("conf") / "s3.yaml"
    path.write_text(yaml.safe_dump({
        "root": f"s3a://{bucket}/lakelog",
        "spark": {"mode": "local", "master": "local[2]", "profile": "small", "conf": s3.spark_conf()},
        "controller": {"delete_partition_enable": True},
    }))
    return path


@pytest.fixture(scope="module")
def session(spark, s3):
    """The test's session with S3A pointed at the emulator (set before any s3a file system is made)."""
    hadoop = spark._jsc.hadoopConfiguration()
    keys = {key[len("spark.hadoop."):]: value for key, value in s3.spark_conf().items()}
    for key, value in keys.items():
        hadoop.set(key, value)
    yield spark
    for key in keys:  # other modules' reads of S3 name their credentials themselves
        hadoop.unset(key)


def frame(spark, producer: str, n: int, keys: int = 20):
    """The records ``records_file`` writes, as a DataFrame for the producer."""
    rows = [(f"k{i % keys}", json.dumps({"p": producer, "n": i})) for i in range(n)]
    return spark.createDataFrame(rows, "key string, value string")


def values(rows) -> Counter:
    return Counter((json.loads(bytes(r["value"]))["p"], json.loads(bytes(r["value"]))["n"]) for r in rows)


# About 9 minutes (a JVM for each CLI command, every commit through the emulator): slow; format("lakelog") below
# and tests/pipelines/spark/test_remote.py keep producers, groups and streams on S3 in make test-s3.
@pytest.mark.slow
def test_the_cli_on_an_s3_root_produces_consumes_resizes_retires_and_audits(session, s3, bucket, conf, tmp_path):
    root, sink = f"s3a://{bucket}/lakelog", f"s3a://{bucket}/sinks/billing"
    cli(conf, "topics", "create", "--topic", T, "--partitions", "3")
    racing = [spawn(conf, "produce", "--topic", T, "--producer-id", p, "--json",
                    "--input", records_file(tmp_path, f"{p}.jsonl", p, 300)) for p in ("feed-a", "feed-b")]
    for proc in racing:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        assert json.loads(out)["appended"] == 300

    def members() -> list[dict]:
        args = ["consume", "--topic", T, "--group", "billing", "--output", sink, "--from-beginning",
                "--idle-timeout", "10", "--json"]
        procs = [spawn(conf, *args) for _ in range(2)]
        results = []
        for proc in procs:
            out, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, err[-3000:]
            results.append(json.loads(out))
        return results

    from control_plane.controller import TopicController
    from control_plane.settings import ControllerSettings
    from pipelines.producer import Producer

    controller = TopicController(session, root, ControllerSettings(delete_partition_enable=True))
    controller.alter(T, 4)
    Producer(session, root, T, "feed-c").send(frame(session, "feed-c", 200))
    controller.alter(T, 3)  # marks partition 3: read-only until drained
    Producer(session, root, T, "feed-d").send(frame(session, "feed-d", 100))
    assert sum(m["records"] for m in members()) == 900
    tick = json.loads(cli(conf, "controller", "tick", "--json").stdout)
    assert [t["retired"] for t in tick if t["topic"] == T] == [[3]], tick
    audit = cli(conf, "audit", "--topic", T, "--sink", sink, "--json", check=False)
    assert audit.returncode == 0, audit.stdout[-3000:] + audit.stderr[-3000:]
    assert json.loads(audit.stdout)["passed"] is True

    storage = s3.environment()
    got = values(DeltaTable(sink, storage_options=storage).to_pyarrow_table(columns=["value"]).to_pylist())
    expected = Counter({(p, n): 1 for p, count in (("feed-a", 300), ("feed-b", 300), ("feed-c", 200), ("feed-d", 100))
                        for n in range(count)})
    assert got == expected, "every record once in the group's sink"
    topics = DeltaTable(f"{root}/control/topics", storage_options=storage).to_pyarrow_table().to_pylist()
    log = DeltaTable(next(r["location"] for r in topics if r["topic"] == T), storage_options=storage)
    rows = log.to_pyarrow_table(columns=["partition", "offset", "value"]).to_pylist()
    assert {r["partition"] for r in rows} == {0, 1, 2}, "the retired partition's rows are gone"
    assert values(rows) <= expected and len(values(rows)) == len(rows), "the rest of the log: each record once"
    for p in {r["partition"] for r in rows}:
        offsets = sorted(r["offset"] for r in rows if r["partition"] == p)
        assert offsets == list(range(len(offsets))), f"partition {p}: dense offsets"


def test_format_lakelog_writes_streams_and_reads_with_a_group_on_an_s3_root(session, s3, bucket):
    """Writes stage with pyarrow on S3 and commit through S3A; reads take the endpoint and
    credentials from the session's S3A settings (no storage.* option, no AWS_* variable)."""
    from pipelines.spark import register

    from control_plane.topics import TopicAdmin

    root = f"s3a://{bucket}/spark"
    TopicAdmin(session, root).create("clicks", 2)
    register(session, root)
    frame(session, "batch", 300).write.format("lakelog").option("topic", "clicks").mode("append").save()
    ck = f"s3a://{bucket}/checkpoints"
    source = session.createDataFrame([(f"k{i % 20}", json.dumps({"p": "stream", "n": i})) for i in range(200)],
                                     "key string, value string")
    stream_input = f"s3a://{bucket}/input"
    source.write.format("delta").save(stream_input)
    (session.readStream.format("delta").option("maxFilesPerTrigger", 1).load(stream_input)
     .writeStream.format("lakelog").option("topic", "clicks").option("checkpointLocation", f"{ck}/write")
     .trigger(availableNow=True).start().awaitTermination())
    silver = f"s3a://{bucket}/silver/clicks"
    (session.readStream.format("lakelog").option("subscribe", "clicks").option("startingOffsets", "earliest")
     .option("group", "to-silver").option("maxOffsetsPerTrigger", 150).load()
     .writeStream.format("delta").option("checkpointLocation", f"{ck}/read").trigger(availableNow=True)
     .start(silver).awaitTermination())
    got = values(DeltaTable(silver, storage_options=s3.environment()).to_pyarrow_table(columns=["value"]).to_pylist())
    assert got == Counter({(p, n): 1 for p, count in (("batch", 300), ("stream", 200)) for n in range(count)})
    batch = session.read.format("lakelog").option("subscribe", "clicks").load()
    assert batch.count() == 500
    positions = DeltaTable(f"{root}/control/offset_commits", storage_options=s3.environment()).to_pyarrow_table()
    assert set(positions.column("group").to_pylist()) == {"to-silver"}, "the group's positions are committed on S3"
    log = TopicAdmin(session, root).get("clicks").location
    for table in (log, f"{root}/control/offset_commits"):
        made_by = committed_by(table, s3.environment())
        assert made_by[1:] and all(e.startswith("delta-rs") for e in made_by[1:]), f"{table}: {made_by}"


def committed_by(table: str, storage: dict) -> list[str]:
    """The engine of each commit of ``table``, by version (its commit info's ``engineInfo``)."""
    history = DeltaTable(table, storage_options=storage).history()
    return [h.get("engineInfo", "") for h in sorted(history, key=lambda h: h["version"])]
