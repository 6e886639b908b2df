"""Delta checkpoints written beside the commits instead of inside them, for long-running processes
(``lakelog serve``) where a commit's latency is a client's.

Delta 4.4 treats the commit that reaches a table's checkpoint interval (every 100th commit of a
topic's log) apart: before it returns, holding the table's snapshot lock, it reconstructs the whole
table state for the statistics it logs (Spark jobs over the last checkpoint and every commit since),
then writes the checkpoint from that state; 2-20 s on this machine, during which every batch queued
for the topic waited (BENCHMARKS.md). Leaving out only the checkpoint hook kept the reconstruction.
A thread that turns deferring on (a server's pool) commits with a transaction class that never
reaches the interval (``lakelog.delta.DeferredCheckpointTransaction``, log_store/jvm), and one
thread of its own writes the due checkpoint through a second ``DeltaLog`` of the table, so that its
state and its lock are not the ones commits use, while commits go on. Nothing depends on when a
checkpoint is written: it only shortens what a reader replays, any version may carry one, and a
process killed before writing it leaves the next interval's to come (Delta writes checkpoints from
any writer, beside concurrent commits, in its own design).

On a local root and on S3 (where commits go through delta-rs) the checkpoint is written by
delta-rs (``write_checkpoint``): from the commit files and the last checkpoint, in Rust, in tens of
milliseconds and no Spark job, where Spark's took 5-12 s of CPU. A thread that does not defer
writes it right after its commit, before the commit call returns, as Delta would; a deferring one
leaves it to the thread. On the stores Delta's engine still commits to (GCS, ADLS, Databricks)
Spark's own checkpoint stays.
"""

from __future__ import annotations

import logging
import queue
import threading

from pyspark.sql import SparkSession

from log_store.files import local_path, reads_with_delta_rs
from log_store.object_store import engine_s3, s3_storage
from log_store.session import is_connect

log = logging.getLogger("lakelog.checkpoints")
# A Hadoop option of the checkpoint writer's DeltaLog only: Delta keys its cache of DeltaLogs by the
# table path and such options, so the writer gets a DeltaLog (snapshots, lock) of its own.
WRITER_OPTION = "fs.lakelog.checkpointWriter"


class DeferredCheckpoints:
    """Writes the checkpoints that deferring commits leave due, on one thread."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self._due: queue.Queue[str | None] = queue.Queue()
        self._queued: set[str] = set()
        self._lock = threading.Lock()
        self.written = 0
        self._busy = False
        self._thread = threading.Thread(target=self._run, name="lakelog-checkpoints", daemon=True)
        self._thread.start()

    def committed(self, path: str, version: int, interval: int) -> None:
        """``version`` of the table at ``path`` committed: queue its checkpoint when one is due."""
        if not checkpoint_due(version, interval):
            return
        with self._lock:
            if path in self._queued:
                return
            self._queued.add(path)
        self._due.put(path)

    def _run(self) -> None:
        from log_store.session import activate

        activate(self.spark)
        while True:
            path = self._due.get()
            if path is None:
                return
            with self._lock:
                self._queued.discard(path)
                self._busy = True
            try:
                self._write(path)
                self.written += 1
            except Exception:  # the next interval's checkpoint comes; a reader replays a little more meanwhile
                log.exception("writing the checkpoint of %s failed", path)
            finally:
                with self._lock:
                    self._busy = False

    def _write(self, path: str) -> None:
        write_checkpoint(self.spark, path)

    def stop(self, timeout: float = 60.0) -> None:
        """Write what is due, then end the thread (a server shutting down)."""
        self._due.put(None)
        self._thread.join(timeout)

    def wait(self, timeout: float = 60.0) -> bool:
        """Whether every queued checkpoint was written within ``timeout`` seconds (tests)."""
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._queued and self._due.empty() and not self._busy:
                    return True
            time.sleep(0.05)
        return False


def write_checkpoint(spark: SparkSession, path: str) -> None:
    """The checkpoint of the table's newest version: by delta-rs on a local root and on S3 (then
    the commit files past the table's log retention are removed, as Delta's checkpoint does), else,
    or when delta-rs cannot write the table (a writer feature it lacks), through a ``DeltaLog`` of
    the table of the writer's own; not at all on Spark Connect (a checkpoint only shortens what
    readers replay: a later one, any writer's, does as well)."""
    if reads_with_delta_rs(path) or engine_s3(path):
        from deltalake import DeltaTable

        try:
            table = (DeltaTable(path, storage_options=s3_storage(spark, path) or None) if engine_s3(path)
                     else DeltaTable(str(local_path(path))))
            table.create_checkpoint()
            table.cleanup_metadata()
            return
        except Exception as exc:  # noqa: BLE001 - Spark's checkpoint writes what delta-rs cannot
            if is_connect(spark):
                log.warning("delta-rs could not write the checkpoint of %s (%s); left to the next one", path, exc)
                return
            log.warning("delta-rs could not write the checkpoint of %s (%s); Spark writes it", path, exc)
    if is_connect(spark):  # Delta's checkpoint is reached through the driver's JVM only; Delta's writers make one
        log.info("the checkpoint of %s is left to Delta's writers: a Spark Connect client cannot write it", path)
        return
    from log_store.delta_classes import jvm

    jvm_ = spark._jvm
    options = jvm_.org.apache.spark.api.python.PythonUtils.toScalaMap({WRITER_OPTION: "true"})
    delta_log = jvm(spark, "delta.DeltaLog.forTable")(spark._jsparkSession, jvm_.org.apache.hadoop.fs.Path(path), options)
    none = jvm(spark, "scala.Option.empty()")
    delta_log.checkpoint(delta_log.update(False, none, none), none)


def checkpoint_due(version: int, interval: int) -> bool:
    """Whether the commit of ``version`` reaches the table's checkpoint interval."""
    return version > 0 and interval > 0 and version % interval == 0


_HERE = threading.local()


def defer_here(checkpoints: DeferredCheckpoints | None) -> None:
    """Commits made from the calling thread from now on leave their checkpoints to ``checkpoints``
    (a server's pool threads call it once; None turns it off)."""
    _HERE.deferred = checkpoints


def deferring() -> DeferredCheckpoints | None:
    """The deferral the calling thread's commits use, if any (``log_store.engine``)."""
    return getattr(_HERE, "deferred", None)
