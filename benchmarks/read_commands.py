"""Read commands as a user runs them (a new process each time): ``topics list/describe`` and
``groups list/describe`` and ``sql`` read with delta-rs (the default on a local root), the same commands
through Spark (``LAKELOG_FAST_READS=0``), and raw Delta: a bare delta-rs read of the same
tables, in one run.

    .venv/bin/python benchmarks/read_commands.py [--topics 20] [--repeats 3]

Prints median seconds and ratios; the numbers go to BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

# Bare reads through delta-rs's query engine, as log_store/rs_reader.py reads (to_pyarrow_table()
# makes a process abort at exit about half the time with deltalake 1.6.6 and pyarrow 17).
RAW = """
import sys
import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
root, topic = sys.argv[1], sys.argv[2]
def rows(path):
    return pa.table(QueryBuilder().register("t", DeltaTable(path)).execute("SELECT * FROM t").read_all()).to_pylist()
rows(root + "/control/topics")
log = DeltaTable(root + "/topics/" + topic)
log.metadata().configuration
[log.transaction_version(f"lakelog.log_end.{p}") for p in range(4)]
"""
RAW_GROUPS = RAW + """
pa.table(DeltaTable(root + "/control/offset_commits").load_cdf(starting_version=0).read_all()).to_pylist()
pa.table(DeltaTable(root + "/control/group_members").load_cdf(starting_version=0).read_all()).to_pylist()
rows(root + "/control/group_generations")
"""

# The SQL queries' raw read: the same tables queried by delta-rs's own engine (DataFusion).
RAW_SQL = """
import sys
import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
root, topic = sys.argv[1], sys.argv[2]
q = QueryBuilder().register("topics", DeltaTable(root + "/control/topics")).register("log", DeltaTable(root + "/topics/" + topic))
pa.table(q.execute("SELECT topic, max(topic_version) FROM topics GROUP BY topic").read_all()).to_pylist()
pa.table(q.execute("SELECT partition, count(*) FROM log GROUP BY partition").read_all()).to_pylist()
"""
SQL_TOPICS = "SELECT topic, partition_count FROM topics ORDER BY topic"
SQL_LOG = "SELECT partition, count(*) AS n FROM log_t0 GROUP BY partition ORDER BY partition"


def timed(cmd: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    out = subprocess.run(cmd, cwd=PROJECT, env=env, capture_output=True, text=True)
    took = time.perf_counter() - started
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {out.stderr[-2000:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topics", type=int, default=20)
    ap.add_argument("--groups", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from control_plane.group.member import GroupMember
    from control_plane.settings import GroupSettings
    from control_plane.topics import TopicAdmin
    from log_store.config import SparkSettings
    from pipelines.consumer import Consumer
    from log_store.session import build_session
    from pipelines.producer import Producer

    root = tempfile.mkdtemp(prefix="lakelog-bench-reads-") + "/root"
    spark = build_session(SparkSettings())
    admin = TopicAdmin(spark, root)
    for i in range(args.topics):
        admin.create(f"t{i}", 4)
    Producer(spark, root, "t0", "p").send(spark.range(1000).selectExpr("cast(id % 50 as string) as key",
                                                                       "cast(id as string) as value", "id as sequence"))
    for i in range(args.groups):  # positions, and one group with generations and member rows
        Consumer(spark, root, "t0", f"g{i}").run(lambda df, r: None)
    member = GroupMember(spark, root, "members", ["t0"], GroupSettings(session_timeout_ms=6000, heartbeat_interval_ms=500))
    while member.generation == 0:
        member.poll()
    member.close()
    spark.stop()

    base = {k: v for k, v in os.environ.items() if k != "LAKELOG_FAST_READS"}
    cli = [sys.executable, "-m", "jobs.cli", "--root", root]
    spark_reads = {**base, "LAKELOG_FAST_READS": "0"}
    topics_raw, groups_raw = "raw Delta: topics (delta-rs, bare read)", "raw Delta: groups (delta-rs, bare read)"
    sql_raw = "raw Delta: both queries' tables (delta-rs's own SQL)"
    cases = {  # name -> command, environment, the raw read it is compared with
        topics_raw: ([sys.executable, "-c", RAW, root, "t0"], base, topics_raw),
        "topics list (delta-rs)": (cli + ["topics", "list", "--json"], base, topics_raw),
        "topics describe (delta-rs)": (cli + ["topics", "describe", "--topic", "t0", "--json"], base, topics_raw),
        "topics list (Spark)": (cli + ["topics", "list", "--json"], spark_reads, topics_raw),
        "topics describe (Spark)": (cli + ["topics", "describe", "--topic", "t0", "--json"], spark_reads, topics_raw),
        groups_raw: ([sys.executable, "-c", RAW_GROUPS, root, "t0"], base, groups_raw),
        "groups list (delta-rs)": (cli + ["groups", "list", "--json"], base, groups_raw),
        "groups describe (delta-rs)": (cli + ["groups", "describe", "--group", "members", "--json"], base, groups_raw),
        "groups list (Spark)": (cli + ["groups", "list", "--json"], spark_reads, groups_raw),
        "groups describe (Spark)": (cli + ["groups", "describe", "--group", "members", "--json"], spark_reads, groups_raw),
        sql_raw: ([sys.executable, "-c", RAW_SQL, root, "t0"], base, sql_raw),
        "sql on topics (delta-rs + DuckDB)": (cli + ["sql", SQL_TOPICS, "--json"], base, sql_raw),
        "sql on a log (delta-rs + DuckDB)": (cli + ["sql", SQL_LOG, "--json"], base, sql_raw),
        "sql on topics (Spark)": (cli + ["sql", SQL_TOPICS, "--json"], spark_reads, sql_raw),
        "sql on a log (Spark)": (cli + ["sql", SQL_LOG, "--json"], spark_reads, sql_raw),
    }
    times = {name: statistics.median(timed(cmd, env) for _ in range(args.repeats)) for name, (cmd, env, _) in cases.items()}
    table = Table(title=f"read commands, {args.topics} topics, {args.groups + 1} groups, median of {args.repeats} runs, "
                        "each a new process")
    for col in ("command", "seconds", "x raw Delta"):
        table.add_column(col)
    for name, t in times.items():
        table.add_row(name, f"{t:.2f}", f"{t / times[cases[name][2]]:.2f}")
    Console().print(table)
    print(f"{platform.node()} {os.cpu_count()} cores, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, "
          f"load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
