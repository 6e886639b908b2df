"""Kafka Connect (4.3.1, distributed mode) on `lakelog serve`: its config, offset and status topics
(compacted, as Connect requires) on lakelog, a FileStreamSource connector copying a file into a
topic and a FileStreamSink connector copying the topic into another file, both created through the
REST API. The worker is killed (SIGKILL) while lines are being copied and started again: the
connectors' configs are still there, and both resume from the offsets they committed."""

from __future__ import annotations

import threading
import time

import pytest

from tests.serve.conftest import serve_without_jvm, stop_serving
from tests.serve.kafka_apps import ConnectWorker
from tests.support import log_rows

pytestmark = pytest.mark.kafka_clients

BEFORE, AFTER = 300, 300  # lines copied before the kill, and written around it


def runs(copied: list[str], source: list[str]) -> list[tuple[int, int]]:
    """``copied`` as runs of the source's lines in order: ``[(start, end), ...]`` such that
    ``copied`` is ``source[start:end]`` for each run, one after the other."""
    index = {line: i for i, line in enumerate(source)}
    assert len(index) == len(source)
    out: list[list[int]] = []
    for line in copied:
        i = index[line]  # KeyError: a line the source never had
        if out and out[-1][1] == i:
            out[-1][1] += 1
        else:
            out.append([i, i + 1])
    return [(a, b) for a, b in out]


def check_resumed(copied: list[str], source: list[str], rewinds: int, committed: int) -> None:
    """At-least-once after one kill: ``copied`` holds every source line, in order, except that up
    to ``rewinds`` times it goes back to an earlier line and goes on in order from there (a task
    re-reading what it had copied after its last committed offset). Each rewind goes back no
    further than ``committed`` lines: those were copied and their offsets committed before the
    kill, so a worker that forgot its offsets (starting again from the file's or topic's start)
    fails here; a skip forward is a lost line."""
    seen = runs(copied, source)
    assert seen[0][0] == 0 and len(seen) <= rewinds + 1, seen
    reached = seen[0][1]
    for start, end in seen[1:]:
        assert committed <= start <= reached, (seen, "a rewind past the committed offsets, or a lost line")
        reached = max(reached, end)
    assert reached == len(source), seen


def test_a_connect_worker_killed_mid_copy_resumes_from_its_offsets_with_its_connectors(tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic

    proc, bootstrap, _took = serve_without_jvm(tmp_path / "root")
    worker = ConnectWorker(tmp_path, bootstrap)
    source_file, sink_file = tmp_path / "source.txt", tmp_path / "sink.txt"
    lines = [f"line-{i:05d}" for i in range(BEFORE + AFTER)]
    source_file.write_text("".join(f"{line}\n" for line in lines[:BEFORE]))
    source = {"connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector", "tasks.max": "1",
              "file": str(source_file), "topic": "lines"}
    sink = {"connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector", "tasks.max": "1",
            "file": str(sink_file), "topics": "lines"}

    def copied() -> list[str]:
        return sink_file.read_text().splitlines() if sink_file.exists() else []

    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic("lines", 1)])["lines"].result(30)
        worker.start()
        worker.put_connector("file-source", source)
        worker.put_connector("file-sink", sink)
        worker.until(lambda: len(copied()) >= BEFORE, 120, f"copying the first {BEFORE} lines")
        time.sleep(2)  # both tasks commit their offsets (every 500 ms)

        def write_the_rest():  # 100 lines a second, across the kill and the restart
            for line in lines[BEFORE:]:
                with source_file.open("a") as f:
                    f.write(f"{line}\n")
                time.sleep(0.01)

        writer = threading.Thread(target=write_the_rest)
        writer.start()
        worker.until(lambda: len(copied()) >= BEFORE + 50, 60, "copying lines written after the first ones")
        worker.kill()
        worker.start()
        status, names = worker.until(lambda: (lambda a: a if a[0] == 200 else None)(worker.rest("GET", "/connectors")),
                                     120, "listing connectors after the restart")
        assert sorted(names) == ["file-sink", "file-source"]  # read back from the config topic
        for name, config in (("file-source", source), ("file-sink", sink)):
            status, kept = worker.rest("GET", f"/connectors/{name}/config")
            assert status == 200 and {k: kept[k] for k in config} == config
        writer.join()
        worker.until(lambda: lines[-1] in copied(), 120, "copying every line after the restart")
        time.sleep(2)  # nothing more comes
        check_resumed([r["value"].decode() for r in sorted(log_rows(str(tmp_path / "root"), "lines"),
                                                           key=lambda r: r["offset"])], lines, 1, BEFORE)
        check_resumed(copied(), lines, 2, BEFORE)
    finally:
        worker.stop()
        err = stop_serving(proc)
    assert "Traceback" not in err, err[-3000:]
