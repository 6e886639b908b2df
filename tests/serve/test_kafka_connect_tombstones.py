"""Kafka Connect's tombstones on `lakelog serve`: a connector deleted through the REST API is
written to the config topic (and its status to the status topic) as tombstones, null values for
its keys. A worker started again after key compaction of both topics (``lakelog topics compact
--keys``), which leaves the deleted connector's tombstones and none of its earlier configs, does
not bring it back, and the connector that was not deleted comes back with its config and runs;
the same once ``delete.retention.ms`` has passed and a second compaction removed the tombstones
too (the task configs Connect never tombstones are all that is left of the deleted connector)."""

from __future__ import annotations

import json
import time

import pytest

from tests.serve.conftest import serve_without_jvm, stop_serving
from tests.serve.kafka_apps import ConnectWorker
from tests.support import cli_without_java, log_rows

pytestmark = pytest.mark.kafka_clients

CONFIGS, STATUS = "connect-configs", "connect-status"  # ConnectWorker's config and status topics
RETENTION_MS = 2000  # delete.retention.ms of both topics in the variant where the tombstones go


def source(path, topic: str) -> dict[str, str]:
    return {"connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector", "tasks.max": "1",
            "file": str(path), "topic": topic}


def records(root: str, topic: str) -> list[tuple]:
    """(partition, offset, key, value) of every record of ``topic``'s log, by partition and offset."""
    return sorted((r["partition"], r["offset"], r["key"], r["value"])
                  for r in log_rows(root, topic, ["partition", "offset", "key", "value"]))


def values(root: str, topic: str) -> list[str]:
    return [v.decode() for _p, _o, _k, v in records(root, topic)]


def tombstoned(rows: list[tuple], key: bytes) -> bool:
    """Whether ``key``'s latest record in ``rows`` is a tombstone."""
    found = [r for r in rows if r[2] == key]
    return bool(found) and found[-1][3] is None


def compact_keys(root: str, topic: str) -> list[dict]:
    """``lakelog topics compact --keys`` of ``topic``, with no JVM: what it cleaned."""
    done = cli_without_java(root, "topics", "compact", "--topic", topic, "--keys", "--json",
                            env={"LAKELOG_NO_JVM": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def kept_by_compaction(before: list[tuple], cleaned: dict[int, int], horizon_passed: bool) -> list[tuple]:
    """Kafka's compacted log of ``before``: below ``cleaned[p]`` each key's latest record, tombstones
    too unless ``horizon_passed``; the rest (and partitions not cleaned) as it was."""
    last: dict[tuple, int] = {}
    for p, o, k, _v in before:
        last[(p, k)] = max(last.get((p, k), -1), o)
    return [r for r in before if r[0] not in cleaned or r[1] >= cleaned[r[0]] or r[2] is None
            or (last[(r[0], r[2])] == r[1] and not (horizon_passed and r[3] is None))]


def compact(root: str, topic: str, horizon_passed: bool = False) -> list[tuple]:
    """Compact ``topic`` by key and check it kept what Kafka's cleaner keeps: its records after."""
    before = records(root, topic)
    done = compact_keys(root, topic)
    assert done, f"nothing of {topic} was due for cleaning"
    cleaned = {c["partition"]: c["cleaned_up_to"] for c in done}
    after = records(root, topic)
    assert after == kept_by_compaction(before, cleaned, horizon_passed), (topic, done, before)
    assert len(after) < len(before), (topic, "compaction removed nothing", before)
    return after


@pytest.mark.parametrize("tombstones_expire", [False, True], ids=["tombstones-kept", "tombstones-removed"])
def test_a_deleted_connector_stays_deleted_after_a_restart_and_key_compaction(tmp_path, tombstones_expire):
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

    root = str(tmp_path / "root")
    proc, bootstrap, _took = serve_without_jvm(root)
    worker = ConnectWorker(tmp_path, bootstrap)
    kept_file, gone_file = tmp_path / "kept.txt", tmp_path / "gone.txt"
    kept_file.write_text("".join(f"kept-{i}\n" for i in range(10)))
    gone_file.write_text("".join(f"gone-{i}\n" for i in range(10)))
    kept, gone = source(kept_file, "kept-lines"), source(gone_file, "gone-lines")
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for made in admin.create_topics([NewTopic("kept-lines", 1), NewTopic("gone-lines", 1)]).values():
            made.result(30)
        worker.start()
        worker.put_connector("kept", kept)
        worker.put_connector("gone", gone)
        worker.until(lambda: len(values(root, "kept-lines")) == 10 and len(values(root, "gone-lines")) == 10, 120,
                     "copying both files")
        # 404: an earlier try deleted it though its answer was lost
        worker.until(lambda: worker.rest("DELETE", "/connectors/gone")[0] in (204, 404), 60, "deleting connector gone")
        worker.until(lambda: worker.rest("GET", "/connectors") == (200, ["kept"]), 60,
                     "listing connectors after the delete")

        # the delete is written as tombstones: the config topic's, at once; the status topic's as the task stops
        assert tombstoned(records(root, CONFIGS), b"connector-gone"), records(root, CONFIGS)
        worker.until(lambda: all(tombstoned(records(root, STATUS), k)
                                 for k in (b"status-connector-gone", b"status-task-gone-0")), 60,
                     "tombstones of connector gone's status")
        time.sleep(1)  # the source task of connector kept commits its offsets
        worker.kill()

        if tombstones_expire:  # as an operator would, through Kafka's AdminClient
            changes = [ConfigResource("topic", topic, incremental_configs=[ConfigEntry(
                "delete.retention.ms", str(RETENTION_MS), incremental_operation=AlterConfigOpType.SET)])
                for topic in (CONFIGS, STATUS)]
            for made in admin.incremental_alter_configs(changes).values():
                made.result(30)
        configs, statuses = compact(root, CONFIGS), compact(root, STATUS)
        for key in (b"connector-gone", b"target-state-gone"):  # the delete's tombstones, and nothing before them
            assert [r[3] for r in configs if r[2] == key] == [None], (key, configs)
        assert [r[3] for r in statuses if r[2] == b"status-connector-gone"] == [None], statuses
        assert [r for r in configs if r[2] == b"connector-kept"][0][3] is not None, configs
        if tombstones_expire:
            time.sleep(RETENTION_MS / 1000 + 0.5)
            configs, statuses = compact(root, CONFIGS, True), compact(root, STATUS, True)
            assert not [r for r in configs if r[2] in (b"connector-gone", b"target-state-gone")], configs
            assert not [r for r in statuses if r[2] in (b"status-connector-gone", b"status-task-gone-0")], statuses

        with kept_file.open("a") as f:
            f.write("".join(f"kept-{i}\n" for i in range(10, 20)))
        with gone_file.open("a") as f:
            f.write("".join(f"gone-{i}\n" for i in range(10, 20)))
        worker.start()
        worker.until(lambda: worker.rest("GET", "/connectors")[0] == 200, 120, "listing connectors after the restart")
        assert worker.rest("GET", "/connectors") == (200, ["kept"]), "the deleted connector came back"
        assert worker.rest("GET", "/connectors/gone/config")[0] == 404
        assert worker.rest("GET", "/connectors/gone/status")[0] == 404
        status, config = worker.rest("GET", "/connectors/kept/config")
        assert status == 200 and {k: config[k] for k in kept} == kept, config

        def running():
            status, body = worker.rest("GET", "/connectors/kept/status")
            return status == 200 and body["connector"]["state"] == "RUNNING" and \
                [t["state"] for t in body["tasks"]] == ["RUNNING"]

        worker.until(running, 120, "connector kept running after the restart")
        worker.until(lambda: values(root, "kept-lines") == [f"kept-{i}" for i in range(20)], 120,
                     "connector kept copying the lines written while the worker was down")
        time.sleep(3)  # a connector gone that came back would copy its file's new lines by now
        assert values(root, "gone-lines") == [f"gone-{i}" for i in range(10)]
        assert worker.rest("GET", "/connectors") == (200, ["kept"])
    finally:
        worker.stop()
        err = stop_serving(proc)
    assert "Traceback" not in err, err[-3000:]
