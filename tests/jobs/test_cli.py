"""The CLI, in-process over the shared session, plus real console-script runs for exit codes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from jobs.cli import cli


def jsonl(tmp_path, lines, name="in.jsonl"):
    f = tmp_path / name
    f.write_text("\n".join(lines) + "\n")
    return str(f)


GOOD = [
    json.dumps({"key": f"user-{i % 5}", "value": {"n": i}, "headers": {"src": "test"}, "timestamp": 1767225600000 + i})
    for i in range(50)
]


def test_create_produce_consume_describe_sql(run, tmp_path, root):
    assert run("topics", "create", "--topic", "t1", "--partitions", "4").exit_code == 0
    listed = json.loads(run("topics", "list", "--json").stdout)
    assert [t["topic"] for t in listed] == ["t1"]
    res = run("produce", "--topic", "t1", "--input", jsonl(tmp_path, GOOD), "--json")
    assert res.exit_code == 0, res.output
    desc = json.loads(run("topics", "describe", "--topic", "t1", "--json").stdout)
    assert [p["partition"] for p in desc["partitions"]] == [0, 1, 2, 3]
    assert sum(p["latest_offset"] for p in desc["partitions"]) == 50
    folders = desc["layout"] == "partitioned"  # an arrival log's partitions share its files
    assert all(p["mode"] == "ReadWrite" and p["leader_epoch"] == 0 and
               (p["location"].endswith(f"partition={p['partition']}") if folders else p["location"] == desc["location"])
               for p in desc["partitions"])
    sink = str(tmp_path / "sink")
    res = run("consume", "--topic", "t1", "--group", "g", "--output", sink, "--max-records", "30", "--json")
    assert res.exit_code == 0 and json.loads(res.stdout)["records"] == 30
    group = json.loads(run("groups", "describe", "--group", "g", "--json").stdout)
    assert sum(r["lag"] for r in group["partitions"]) == 20
    assert group["generation"] == 1 and group["state"] == "Empty" and group["protocol"] == "eager"
    assert len(group["members"]) == 1 and len(group["members"][0]["partitions"]) == 4
    assert json.loads(run("groups", "list", "--json").stdout)[0]["group"] == "g"
    printed = run("consume", "--topic", "t1", "--group", "g", "--json")
    records = [json.loads(line) for line in printed.stdout.splitlines() if line.startswith("{")]
    assert len(records) == 20 and all(r["value"].startswith('{"n":') for r in records)
    q = run("sql", "SELECT topic, partition_count FROM topics", "--json")
    assert json.loads(q.stdout) == [{"topic": "t1", "partition_count": 4}]
    q = run("sql", "SELECT count(*) AS n FROM log_t1", "--json")
    assert json.loads(q.stdout) == [{"n": 50}]
    assert "topics" in run("sql", "SHOW VIEWS").output


@pytest.mark.parametrize("reader", ["python", "spark"])
def test_a_null_value_is_produced_and_consumed_as_null_and_an_empty_one_as_empty(run, tmp_path, root, monkeypatch,
                                                                               reader):
    """``"value": null`` is a tombstone, ``""`` an empty value, read by either reader of JSON Lines
    (a small file in Python, a larger one by Spark); a record with no 'value' field is refused."""
    from tests.support import EMPTY_KEY, TOMBSTONE_KEY, check_tombstones, log_rows

    if reader == "spark":
        monkeypatch.setattr("pipelines.inputs.read_local_json_lines", lambda _path, _limit: None)
    assert run("topics", "create", "--topic", "t", "--partitions", "2").exit_code == 0
    values = {TOMBSTONE_KEY: None, EMPTY_KEY: ""}
    lines = [json.dumps({"key": str(i), "value": values.get(str(i), "x")}) for i in range(6)]
    res = run("produce", "--topic", "t", "--input", jsonl(tmp_path, lines[:2] + ['{"key": "a"}']))
    assert res.exit_code == 1 and "line 3: record has no 'value'" in res.output, res.output
    assert run("produce", "--topic", "t", "--input", jsonl(tmp_path, lines)).exit_code == 0
    check_tombstones(log_rows(root, "t", ["key", "value"]))
    printed = run("consume", "--topic", "t", "--group", "g", "--json")
    records = {r["key"]: r["value"] for r in map(json.loads, printed.stdout.splitlines()) if "key" in r}
    assert records == {str(i): values.get(str(i), "x") for i in range(6)}
    printed = run("consume", "--topic", "t", "--group", "g2").stdout.splitlines()
    assert {line.split("\t")[2]: line.split("\t")[3] for line in printed if line.startswith("Partition:")} == \
        {str(i): {TOMBSTONE_KEY: "null", EMPTY_KEY: ""}.get(str(i), "x") for i in range(6)}


def test_sql_reads_only_the_views_its_query_names(run, tmp_path, root):
    """Each view is a Delta snapshot load: a query pays for the ones it names, so one topic's
    unreadable log does not break queries on the control plane or on other topics."""
    import shutil

    for t in ("t1", "t2"):
        assert run("topics", "create", "--topic", t, "--partitions", "2").exit_code == 0
    assert run("produce", "--topic", "t1", "--input", jsonl(tmp_path, GOOD)).exit_code == 0
    location = next(t["location"] for t in json.loads(run("topics", "list", "--json").stdout) if t["topic"] == "t2")
    shutil.rmtree(Path(location.removeprefix("file:")) / "_delta_log")  # t2's log is no Delta table now
    q = run("sql", "SELECT count(*) AS n FROM topic_history", "--json")
    assert q.exit_code == 0 and json.loads(q.stdout) == [{"n": 2}], q.output
    q = run("sql", "SELECT p.topic, count(*) AS n FROM PARTITIONS p JOIN Log_T1 l ON l.partition = p.partition "
                   "WHERE p.topic = 't1' GROUP BY p.topic", "--json")
    assert q.exit_code == 0 and json.loads(q.stdout) == [{"topic": "t1", "n": 50}], q.output


def _nothing_written(root):
    topics = Path(root) / "topics"
    return not topics.exists() or not any(topics.iterdir())


def test_unknown_topic(run, tmp_path, root):
    res = run("produce", "--topic", "nope", "--input", jsonl(tmp_path, GOOD))
    assert res.exit_code == 1 and "unknown topic 'nope'" in res.output and "topics create" in res.output
    assert run("topics", "describe", "--topic", "nope").exit_code == 1
    assert run("consume", "--topic", "nope", "--group", "g").exit_code == 1
    assert _nothing_written(root)


def test_topic_already_exists_and_bad_partition_counts(run, root):
    assert run("topics", "create", "--topic", "t", "--partitions", "2").exit_code == 0
    res = run("topics", "create", "--topic", "t", "--partitions", "2")
    assert res.exit_code == 1 and "already exists" in res.output
    for bad in ("0", "-1"):
        res = run("topics", "create", "--topic", "u", "--partitions", bad)
        assert res.exit_code == 1 and "invalid partition count" in res.output
    assert not (Path(root) / "topics" / "u").exists()
    for bad in ("bad/name", "bad\n", ".", ".."):
        res = run("topics", "create", "--topic", bad, "--partitions", "1")
        assert res.exit_code == 1 and ("invalid topic name" in res.output), (bad, res.output)
    assert [t["topic"] for t in json.loads(run("topics", "list", "--json").stdout)] == ["t"], "nothing else created"


@pytest.mark.parametrize(
    "lines,expected",
    [
        (GOOD[:3] + ['{"key": "a", "value": '] + GOOD[3:5], "line 4: malformed JSON"),
        (GOOD[:2] + ['{"key": "a"}'], "line 3: record has no 'value'"),
        (GOOD[:1] + ['[1, 2]'], "line 2: malformed JSON"),
        (GOOD[:1] + ['{"key": "a", "value": "v", "timestamp": "yesterday"}'], "line 2: bad timestamp"),
    ],
)
@pytest.mark.parametrize("reader", ["python", "spark"])
def test_bad_input_lines_name_the_line_and_write_nothing(run, tmp_path, root, lines, expected, reader, monkeypatch):
    """Either reader of JSON Lines (a small file in Python, a larger or remote one by Spark)."""
    if reader == "spark":
        monkeypatch.setattr("pipelines.inputs.read_local_json_lines", lambda _path, _limit: None)
    run("topics", "create", "--topic", "t", "--partitions", "2")
    res = run("produce", "--topic", "t", "--input", jsonl(tmp_path, lines))
    assert res.exit_code == 1 and expected in res.output and "Nothing was produced" in res.output
    desc = json.loads(run("topics", "describe", "--topic", "t", "--json").stdout)
    assert sum(p["latest_offset"] for p in desc["partitions"]) == 0


def test_unreadable_and_missing_input(run, tmp_path):
    run("topics", "create", "--topic", "t", "--partitions", "1")
    res = run("produce", "--topic", "t", "--input", str(tmp_path / "missing.jsonl"))
    assert res.exit_code == 1 and "does not exist" in res.output
    locked = jsonl(tmp_path, GOOD, "locked.jsonl")
    os.chmod(locked, 0)
    if os.access(locked, os.R_OK):  # root ignores file modes: use a directory of the wrong kind
        os.chmod(locked, 0o644)
        locked = str(tmp_path / "dir.jsonl")
        os.mkdir(locked)
    res = run("produce", "--topic", "t", "--input", locked)
    assert res.exit_code == 1 and ("not readable" in res.output or "cannot be read" in res.output)
    assert json.loads(run("topics", "describe", "--topic", "t", "--json").stdout)["partitions"][0]["latest_offset"] == 0


def test_unwritable_root(spark, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    res = CliRunner().invoke(cli, ["--root", str(blocker / "root"), "topics", "create", "--topic", "t", "--partitions", "1"])
    assert res.exit_code == 1 and "cannot create root" in res.output


def test_invalid_configuration_file_names_the_key(spark, tmp_path):
    conf = tmp_path / "bad.yaml"
    conf.write_text("consumer:\n  max_records_per_batch: 0\n")
    res = CliRunner().invoke(cli, ["--conf", str(conf), "--root", str(tmp_path), "topics", "list"])
    assert res.exit_code == 1 and "consumer.max_records_per_batch" in res.output


def test_console_script_exit_code_and_message(tmp_path):
    """A real `lakelog` process: the error reaches the user and the exit code is non-zero."""
    exe = Path(sys.executable).parent / "lakelog"
    conf = tmp_path / "bad.yaml"
    conf.write_text("producer:\n  batchsize: 10\n")
    proc = subprocess.run([str(exe), "--conf", str(conf), "topics", "list"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "producer.batchsize" in proc.stderr


@pytest.mark.slow  # 20 s, four cold CLI processes
def test_spark_and_jvm_log_lines_stay_off_the_terminal(tmp_path):
    """Without --verbose a read command prints its answer, and stderr carries none of Spark's or
    log4j's own lines (the start-up banner, the default log level, warnings)."""
    project = Path(__file__).resolve().parents[2]
    env = {**os.environ, "LAKELOG_FAST_READS": "0"}  # through Spark: on a local root it would read without a JVM
    proc = subprocess.run([sys.executable, "-m", "jobs.cli", "topics", "list", "--root", str(tmp_path / "r"), "--json"],
                          capture_output=True, text=True, timeout=300, cwd=project, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]"
    noise = [line for line in proc.stderr.splitlines() if "incubator" not in line]  # the JVM's own notice
    assert noise == [], proc.stderr
    # a query Spark refuses: its error, once, as lakelog's one line (PySpark also logs it as JSON)
    proc = subprocess.run([sys.executable, "-m", "jobs.cli", "sql", "SELECT * FROM no_such_view", "--root",
                           str(tmp_path / "r")], capture_output=True, text=True, timeout=300, cwd=project, env=env)
    noise = [line for line in proc.stderr.splitlines() if "incubator" not in line]
    assert proc.returncode == 1 and len(noise) == 1 and noise[0].startswith("error: ") and "no_such_view" in noise[0], proc.stderr


def test_console_consumer_conventions(run, tmp_path, root):
    """--partition/--offset reads one partition without a group; --from-beginning and a default
    console group; the readable format shows partition, offset, key and value."""
    assert run("topics", "create", "--topic", "c1", "--partitions", "2").exit_code == 0
    assert run("produce", "--topic", "c1", "--input", jsonl(tmp_path, GOOD)).exit_code == 0
    desc = json.loads(run("topics", "describe", "--topic", "c1", "--json").stdout)
    p0_end = desc["partitions"][0]["latest_offset"]
    one = run("consume", "--topic", "c1", "--partition", "0", "--offset", "2", "--json")
    recs = [json.loads(line) for line in one.stdout.splitlines() if line.startswith("{")]
    assert one.exit_code == 0 and [r["offset"] for r in recs] == list(range(2, p0_end))
    assert {r["partition"] for r in recs} == {0}
    shown = run("consume", "--topic", "c1", "--partition", "0", "--offset", "earliest", "--max-records", "2")
    lines = [ln for ln in shown.stdout.splitlines() if ln.startswith("Partition:")]
    assert lines[0].startswith("Partition:0\tOffset:0\tuser-") and '{"n":' in lines[0] and len(lines) == 2
    assert run("consume", "--topic", "c1", "--partition", "0", "--offset", "latest").stdout.strip() == ""
    assert json.loads(run("groups", "list", "--json").stdout) == [], "a partition read joins no group, commits nothing"
    fresh = run("consume", "--topic", "c1", "--from-beginning", "--json")
    assert fresh.exit_code == 0 and len([ln for ln in fresh.stdout.splitlines() if ln.startswith("{")]) == 50
    assert "console-consumer-" in fresh.output
    for bad, words, code in (
        (("--partition", "0"), "go together", 2),
        (("--partition", "0", "--offset", "-3"), "a number >= 0", 1),
        (("--partition", "0", "--offset", "soon"), "a number >= 0", 1),
        (("--partition", "9", "--offset", "0"), "not a readable partition", 1),
        (("--partition", "0", "--offset", "0", "--group", "g"), "without a group", 2),
    ):
        res = run("consume", "--topic", "c1", *bad)
        assert res.exit_code == code and words in res.output, (bad, res.output)


@pytest.mark.parametrize("java", ["JAVA_HOME without java", "a java that exits at once"])
def test_a_jvm_that_cannot_start_is_one_clear_error_and_nothing_written(tmp_path, java):
    """A command that needs Spark, with Java missing or broken: one `error:` line saying what to
    check, exit 1, no traceback, nothing under the root."""
    home = tmp_path / "java"
    if java == "a java that exits at once":
        (home / "bin").mkdir(parents=True)
        (home / "bin" / "java").write_text("#!/bin/sh\necho 'Error: broken JVM' >&2\nexit 1\n")
        (home / "bin" / "java").chmod(0o755)
    root = tmp_path / "r"
    exe = Path(sys.executable).parent / "lakelog"
    # a Structured Streaming query: Spark's (``topics create`` and most commands start no JVM on a local root)
    proc = subprocess.run([str(exe), "stream", "--topic", "t", "--output", str(tmp_path / "o"), "--checkpoint",
                           str(tmp_path / "c"), "--root", str(root)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "JAVA_HOME": str(home)})
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "JAVA_HOME" in errors[0] and "Java 17" in errors[0], proc.stderr
    assert not root.exists() or not any(root.rglob("*.json")), "nothing written"


@pytest.mark.long
def test_stream_runs_a_structured_streaming_query_into_a_delta_table(run, tmp_path, root):
    from deltalake import DeltaTable as RsTable

    assert run("topics", "create", "--topic", "s.v1", "--partitions", "3").exit_code == 0
    assert run("produce", "--topic", "s.v1", "--input", jsonl(tmp_path, GOOD)).exit_code == 0
    table, ck = str(tmp_path / "table"), str(tmp_path / "ck")
    args = ("stream", "--topic", "s.v1", "--output", table, "--checkpoint", ck, "--group", "g-s",
            "--max-offsets-per-trigger", "20", "--json")
    first = json.loads(run(*args).stdout)
    assert first["records"] == 50 and [b["records"] for b in first["batches"]] == [20, 20, 10]
    assert RsTable(table).to_pyarrow_table().num_rows == 50
    again = json.loads(run(*args).stdout)
    assert again["records"] == 0, "the checkpoint holds the positions"
    lag = json.loads(run("groups", "describe", "--group", "g-s", "--json").stdout)
    assert lag["partitions"] and all(p["lag"] == 0 for p in lag["partitions"])
    bad = run("stream", "--topic", "nope", "--output", table, "--checkpoint", str(tmp_path / "ck2"))
    assert bad.exit_code == 1 and "subscribe names topic(s) that do not exist under this root: 'nope'" in bad.output
    assert "Traceback" not in bad.output and len(bad.output.strip().splitlines()) == 1


@pytest.mark.long
def test_stream_reads_committed_records_only_when_asked(run, tmp_path, root):
    """``lakelog stream --isolation-level read_committed``: an aborted transaction's records and an
    open one's are left out (the query stops at the last stable offset); by default every record."""
    from deltalake import DeltaTable as RsTable

    from control_plane.topics import TopicAdmin
    from log_store.session import LazySession
    from tests.pipelines.test_txn_consume import Producers

    assert run("topics", "create", "--topic", "t", "--partitions", "1").exit_code == 0
    Producers(TopicAdmin(LazySession(lambda: pytest.fail("a JVM was started")), root).log("t"), count=1
              ).aborted_committed_open()

    def streamed(name: str, *more: str) -> list[str]:
        table = str(tmp_path / name)
        out = run("stream", "--topic", "t", "--output", table, "--checkpoint", str(tmp_path / f"{name}-ck"), *more)
        assert out.exit_code == 0, out.output
        return [v.decode() for v in RsTable(table).to_pyarrow_table().sort_by("offset").column("value").to_pylist()]

    assert streamed("committed", "--isolation-level", "read_committed") == ["co0"]
    assert streamed("every") == ["ab0", "co0", "op0", "p0"]
    bad = run("stream", "--topic", "t", "--output", str(tmp_path / "x"), "--checkpoint", str(tmp_path / "y"),
              "--isolation-level", "serializable")
    assert bad.exit_code == 2 and "read_committed" in bad.output
