"""The declarative pipeline example (``examples/ordered_pipeline``) run as a user runs it:
``spark-pipelines run --remote`` against a Spark Connect server with Delta and without lakelog's
jar (``log_store/connect_server.py``), twice, with a resize of its topic between the runs. Checked
with delta-rs, not with lakelog's reads: the streaming table holds every record once, each key in
order (by Delta version, then offset: a key's records never share a micro-batch across
partitions), and the second run takes only what came after the first; the flow to the topic
``orders_copy`` lands each record there once, each key in the order it was produced.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
import yaml
from deltalake import DeltaTable

from control_plane.controller import TopicController
from control_plane.settings import ControllerSettings
from control_plane.topics import TopicAdmin
from pipelines.producer import Producer
from tests.support import PROJECT, log_rows

EXAMPLE = PROJECT / "examples" / "ordered_pipeline"
SPEC = "spark-pipeline.yml"
KEYS = 20


def _send(spark, root: str, first: int, n: int) -> None:
    """``n`` records in order: value = the production index, key = index % KEYS."""
    rows = [{"key": f"k{i % KEYS}", "value": str(i)} for i in range(first, first + n)]
    assert Producer(spark, root, "orders", "p").send(spark.createDataFrame(rows)).appended == n


def _pipeline(tmp_path: Path, root: str, database: str) -> Path:
    """The example's project, its spec pointed at this test's root, storage and database."""
    project = tmp_path / "pipeline"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__"))
    spec = yaml.safe_load((EXAMPLE / SPEC).read_text())
    spec["storage"] = (tmp_path / "pipeline-storage").as_uri()
    spec["database"] = database
    spec["configuration"]["lakelog.root"] = root
    (project / SPEC).write_text(yaml.safe_dump(spec))
    return project / SPEC


def _run(spec: Path, remote: str) -> float:
    """``spark-pipelines run`` as a user types it; its seconds."""
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT), os.environ.get("PYTHONPATH")]))}
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    began = time.monotonic()
    proc = subprocess.run([str(bin_dir / "spark-pipelines"), "run", "--spec", str(spec), "--remote", remote],
                          capture_output=True, text=True, timeout=600, env=env, cwd=spec.parent)
    assert proc.returncode == 0, f"spark-pipelines failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return time.monotonic() - began


def _delivered(table: str) -> list[dict]:
    """The streaming table's rows in the order its versions added them (delta-rs, version by version)."""
    seen: set[tuple[int, int]] = set()
    out: list[dict] = []
    for version in range(DeltaTable(table).version() + 1):
        rows = DeltaTable(table, version=version).to_pyarrow_table().to_pylist()
        for r in sorted(rows, key=lambda r: (r["partition"], r["offset"])):
            place = (r["partition"], r["offset"])
            if place not in seen:
                seen.add(place)
                out.append({**r, "version": version})
    return out


def _check(rows: list[dict], produced: int) -> None:
    """Every record once; each key's values rise in delivery order, one partition per key per version."""
    values = sorted(int(r["value"]) for r in rows)
    assert values == list(range(produced)), f"{len(rows)} rows, not each of {produced} once"
    by_key: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_key[r["key"]].append(r)
    for key, found in by_key.items():
        partitions: dict[int, set[int]] = defaultdict(set)
        for r in found:
            partitions[r["version"]].add(r["partition"])
        assert all(len(p) == 1 for p in partitions.values()), f"key {key} in two partitions of one micro-batch"
        in_order = [int(r["value"]) for r in sorted(found, key=lambda r: (r["version"], r["offset"]))]
        assert in_order == sorted(in_order), f"key {key} out of order"


def _check_copy(root: str, produced: int) -> None:
    """The topic ``orders_copy`` (delta-rs): each record once, each key in one partition, its
    values in the order they were produced (the source's order of the key, ``_check``)."""
    copied = log_rows(root, "orders_copy", ["key", "value", "partition", "offset"])
    values = sorted(int(bytes(r["value"])) for r in copied)
    assert values == list(range(produced)), f"orders_copy: {len(copied)} rows, not each of {produced} once"
    by_key: dict[str, list[dict]] = defaultdict(list)
    for r in copied:
        by_key[bytes(r["key"]).decode()].append(r)
    for key, found in by_key.items():
        assert len({r["partition"] for r in found}) == 1, f"orders_copy: key {key} in two partitions"
        in_offsets = [int(bytes(r["value"])) for r in sorted(found, key=lambda r: r["offset"])]
        produced_order = [i for i in range(produced) if f"k{i % KEYS}" == key]
        assert in_offsets == produced_order, f"orders_copy: key {key} out of order: {in_offsets[:12]}..."


def test_pipeline_reads_every_record_once_in_key_order_across_a_resize(spark, connect_server, root, tmp_path):
    admin = TopicAdmin(spark, root)
    admin.create("orders", 4)
    admin.create("orders_copy", 3)
    _send(spark, root, 0, 400)

    database = f"sdp_{tmp_path.name.replace('-', '_')}"
    client = connect_server.session()
    try:
        client.sql(f"CREATE DATABASE {database} LOCATION '{tmp_path / 'warehouse'}'")
    finally:
        client.stop()
    spec = _pipeline(tmp_path, root, database)
    table = str(tmp_path / "warehouse" / "orders")

    first = _run(spec, connect_server.url)
    _check(_delivered(table), 400)
    _check_copy(root, 400)

    _send(spark, root, 400, 200)
    TopicController(spark, root, ControllerSettings()).alter("orders", 6)
    assert admin.describe("orders").partition_count == 6
    _send(spark, root, 600, 200)
    second = _run(spec, connect_server.url)
    rows = _delivered(table)
    _check(rows, 800)
    _check_copy(root, 800)
    assert {r["partition"] for r in rows if int(r["value"]) >= 600} & {4, 5}, "no record in a grown partition"

    per_key = DeltaTable(str(tmp_path / "warehouse" / "orders_per_key")).to_pyarrow_table().to_pylist()
    assert {r["key"]: r["records"] for r in per_key} == {f"k{k}": 800 // KEYS for k in range(KEYS)}
    print(f"\nspark-pipelines run: {first:.1f} s, then {second:.1f} s after the resize")
