"""A lost root, classified in one place (``log_store.delta_errors.lost_root``, ``translate``), and
said in one line when a role has waited for it long enough (``pipelines.waits``)."""

from __future__ import annotations

import errno
import time

import pytest

from control_plane.records import ReplicaEvent, ReplicaState
from log_store.delta_errors import lost_root, translate
from log_store.errors import LakelogError, LeaderNotAvailableError, StorageError, leader_unavailable
from pipelines.waits import LostRootWait

# What storage said in the runs of tests/processes/test_lost_leader.py, one per kind of loss.
SAID = {
    "not a directory": "An error occurred while calling o318.commit.\n: java.nio.file.FileSystemException: "
                       "/r/eu/topics/orders/_delta_log/.lakelog-tmp: Not a directory\n\tat sun.nio.fs.UnixException",
    "refusing access": "An error occurred while calling o318.commit.\n: java.nio.file.AccessDeniedException: "
                       "/r/eu/topics/orders/_delta_log/.lakelog-tmp\n\tat sun.nio.fs.UnixException",
    "missing": "[PATH_NOT_FOUND] Path does not exist: /r/eu/topics/orders. SQLSTATE: 42K03",
    "log folder missing": "An error occurred while calling o9.commit.\n: java.io.IOException: LAKELOG_MISSING_LOG_FOLDER "
                          "/r/eu/topics/orders/_delta_log",
    "a file gone mid-read": "[FAILED_READ_FILE.FILE_NOT_EXIST] Error while reading file file:/r/eu/topics/orders/x.parquet",
    "hadoop's mkdirs": "java.io.IOException: Mkdirs failed to create file:/r/eu/topics/orders/partition=0",
}


@pytest.mark.parametrize("text", SAID.values(), ids=SAID.keys())
def test_each_way_a_root_is_lost_is_a_storage_error_naming_its_cause(text):
    assert lost_root(RuntimeError(text))
    said = translate(RuntimeError(text))
    assert type(said) is StorageError and "the root is lost, unmounted, not a directory or refusing access" in str(said)
    assert "An error occurred while calling" not in str(said)


@pytest.mark.parametrize("code", [errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM])
def test_pythons_own_reads_and_writes_of_a_lost_root_are_one_too(code):
    assert lost_root(OSError(code, "x"))
    try:
        try:
            raise OSError(code, "x")
        except OSError as exc:
            raise LakelogError("writing a file failed") from exc
    except LakelogError as exc:
        assert lost_root(exc), "what caused it counts"


def test_the_file_gone_under_a_streams_batch_is_named():
    """pyspark raises a stream's failure from None, saying the outermost Java error (the sink's
    write); the Java error it came from, with the failed read among its causes, is its context."""
    from log_store.delta_errors import missing_file

    gone = "file:///r/us/topics/orders/partition=1/part-0.snappy.parquet"
    java = RuntimeError("org.apache.spark.SparkException: [TASK_WRITE_FAILED] Task failed while writing rows\n"
                        f"Caused by: org.apache.spark.SparkException: [FAILED_READ_FILE.FILE_NOT_EXIST] Encountered "
                        f"error while reading file {gone}. File does not exist. It is possible the underlying files "
                        "have been updated.")
    try:
        try:
            raise java
        except RuntimeError:
            raise ValueError("[STREAM_FAILED] Query terminated with exception: [TASK_WRITE_FAILED]") from None
    except ValueError as failed:
        assert missing_file(failed) == gone and lost_root(failed)
    assert missing_file(RuntimeError("[DIVIDE_BY_ZERO] Division by zero")) is None


def test_other_failures_are_not_a_lost_root():
    assert not lost_root(RuntimeError("[DIVIDE_BY_ZERO] Division by zero"))
    assert not lost_root(OSError(errno.ENOSPC, "No space left on device"))
    assert type(translate(RuntimeError("bad row"))) is LakelogError


def _state(in_sync: list[str]) -> ReplicaState:
    return ReplicaState(topic="orders", incarnation=1, replica_version=2, event=ReplicaEvent.CREATE,
                        replicas=["/eu", "/us"], leader="/eu", leader_epoch=0, in_sync=in_sync, epoch_starts=[])


def _given_up(state, exc) -> LakelogError:
    wait = LostRootWait("orders", 30, "producer.delivery_timeout_ms", lambda: state, backoff_ms=1)
    started = time.monotonic()
    with pytest.raises(LakelogError) as raised:
        while True:
            wait.failed(exc)
    assert time.monotonic() - started >= 0.03, "it waited its timeout"
    return raised.value


def test_a_lost_leader_waited_out_too_long_names_the_root_and_the_election():
    lost = leader_unavailable("orders", "/eu/topics/orders",
                              StorageError("no topic log at /eu/topics/orders: its root is lost or not mounted"))
    said = _given_up(_state(["/eu", "/us"]), lost)
    assert isinstance(said, LeaderNotAvailableError) and "\n" not in str(said)
    assert str(said) == ("the leader root /eu of 'orders' could not be reached for 0 s (producer.delivery_timeout_ms): no "
                         "topic log at /eu/topics/orders: its root is lost or not mounted; elect an in-sync root "
                         "(lakelog topics elect-leader --topic orders --leader /us)")
    alone = _given_up(_state(["/eu"]), lost)
    assert "no in-sync root is left to elect: bring /eu back, or elect another root with --unclean" in str(alone)


def test_a_topic_with_one_root_waited_out_too_long_names_its_log():
    said = _given_up(None, StorageError("no topic log at /eu/topics/orders: its root is lost or not mounted"))
    assert type(said) is StorageError and "\n" not in str(said)
    assert str(said) == ("'orders' could not be read or written for 0 s (producer.delivery_timeout_ms): no topic log at "
                         "/eu/topics/orders: its root is lost or not mounted; bring its root back (it is lost, unmounted, "
                         "not a directory or refusing access) and run the command again")


def test_storage_lost_elsewhere_than_a_replicated_topics_leader_is_not_said_to_be_the_leader():
    """A consumer's sink lost while the topic's leader is fine: the line names what failed, not the leader."""
    said = _given_up(_state(["/eu", "/us"]), StorageError("storage refused (java.nio.file.AccessDeniedException: "
                                                          "/sinks/g/_delta_log): the root is lost, ..."))
    assert type(said) is StorageError and "/sinks/g/_delta_log" in str(said) and "elect" not in str(said)
