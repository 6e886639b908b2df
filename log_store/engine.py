"""The engine facade: Delta's transactions through py4j (``log_store.delta_classes`` finds the classes).

Delta's DataFrame writer makes blind appends, which never conflict. lakelog's appends must fail
when the partition's metadata or log end moved under them, so they open a transaction on the
table's DeltaLog, read the metadata and the application transaction ids (``SetTransaction``)
*inside* it, write files and commit them together with new ``SetTransaction`` versions. Delta
then rejects the commit if a concurrent commit changed the metadata or the same application ids.

"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Iterable, Mapping

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from log_store import checkpoints, delta_log
from log_store import app_versions as carried_versions
from log_store.arrow_files import WrittenFile, arrow_schema, fit_rows, parquet_files, split_by, with_tags, written_file
from log_store.arrow_files import stats_columns as table_stats_columns
from log_store.files import is_remote, local_checksum, reads_with_delta_rs, write_file
from log_store.object_store import arrow_filesystem, engine_s3, s3_storage
from log_store.delta_errors import translate
from log_store.errors import LakelogError, StorageError
from log_store.delta_classes import INTERNALS_CONF, delta, jvm, jvm_json, per_session

HISTORY_METRICS_CONF = "spark.databricks.delta.history.metricsEnabled"

logger = logging.getLogger("lakelog.engine")


class DeltaTransaction:
    """One open optimistic transaction on a Delta table (see module docstring)."""

    def __init__(self, spark: SparkSession, jtxn: Any, path: str | None = None) -> None:
        self.spark = spark
        self.jtxn = jtxn
        self.path = path
        self._actions = jvm(spark, "java.util.ArrayList")()
        self._known: dict[str, int] | None = None
        self._conf: dict[str, str] | None = None
        self._checkpoints_after = False  # the commit leaves the checkpoint interval to ``_commit``

    @classmethod
    def start(cls, spark: SparkSession, path: str) -> "DeltaTransaction":
        """A transaction on the newest snapshot; on a thread deferring checkpoints or on a local root
        (open-source Delta), one whose commit neither writes a checkpoint nor rebuilds the table state:
        the checkpoint is written after it (log_store/checkpoints.py)."""
        log = jvm(spark, "delta.DeltaLog.forTable")(spark._jsparkSession, path)
        if (checkpoints.deferring() is not None or reads_with_delta_rs(path)) \
                and spark.conf.get(INTERNALS_CONF, "oss") == "oss":
            txn = cls(spark, jvm(spark, "lakelog.delta.DeferredCheckpointTransaction")(log), path)
            txn._checkpoints_after = True
            return txn
        return cls(spark, log.startTransaction(), path)

    @property
    def read_version(self) -> int:
        return int(self.jtxn.readVersion())

    def release(self) -> None:
        """End a transaction that only read (``RsTransaction.release``); Delta's needs nothing."""

    def table_id(self) -> str:
        """The table's id: a UUID Delta gives a table when it is created, never reused."""
        return str(self.jtxn.metadata().id())

    def configuration(self) -> dict[str, str]:
        """The table properties as of this transaction's snapshot (read once)."""
        if self._conf is None:
            # a property delta-rs dropped is set to the empty string (``rs_engine.set_properties``)
            self._conf = {str(k): str(v) for k, v in jvm_json(self.spark, self.jtxn.metadata().configuration()).items()
                          if str(v) != ""}
        return dict(self._conf)

    def column(self, name: str):
        """The table's column ``name`` (a Spark ``StructField``: type, nullability) as of this transaction's snapshot."""
        from pyspark.sql.types import StructType

        return StructType.fromJson(json.loads(self.jtxn.metadata().schemaString()))[name]

    def column_type(self, name: str):
        """The Spark type of the table's column ``name`` as of this transaction's snapshot."""
        return self.column(name).dataType

    def snapshot_app_versions(self) -> dict[str, int]:
        """All application versions of this transaction's snapshot, *without* depending on them:
        only ids later passed to ``app_version`` make the commit conflict when they move.

        Read from the snapshot's checksum file (``.crc``), where Delta keeps every set
        transaction, when it has them (up to 1,000; delta-rs's commits leave none); otherwise, on a
        local table, from those this process read of an earlier version and the commit files since
        (``log_store.app_versions``), or from the last checkpoint and the commit files after it
        (``log_store.delta_log``); else from the snapshot's state, which Delta reconstructs with a
        Spark job (about 0.5 s a snapshot, a second and more with thousands of producers).
        """
        if self._known is None:
            self._known = self._from_checksum()
            if self._known is None:
                table_id = self.table_id()
                self._known = carried_versions.moved_on(self.path, table_id, self.read_version)
                if self._known is None and self.path is not None and not is_remote(self.path):
                    # the commit files themselves: no crc after delta-rs's commits, and no Spark job
                    fs, local = arrow_filesystem(self.path)
                    try:
                        self._known = delta_log.replay(fs, f"{local}/_delta_log", self.read_version).txns
                    except delta_log.V2CheckpointError:  # Delta's own state
                        pass
                if self._known is None:
                    self._known = {str(k): int(v) for k, v in jvm_json(self.spark, self.jtxn.snapshot().transactions()).items()}
                    carried_versions.remember(self.path, table_id, self.read_version, self._known)
        return dict(self._known)

    def _from_checksum(self) -> dict[str, int] | None:
        """From the snapshot's checksum: on a local disk its file, read here (through py4j it cost
        about 35 ms a commit with 500 producers); elsewhere, or before the file is written, Delta's."""
        found = local_checksum(self.path, self.read_version) if self.path else None
        if found is not None and found.get("setTransactions") is not None:
            return {t["appId"]: int(t["version"]) for t in found["setTransactions"]}
        crc = self.jtxn.snapshot().checksumOpt()
        if not crc.isDefined() or not crc.get().setTransactions().isDefined():
            return None
        return {t["appId"]: int(t["version"]) for t in jvm_json(self.spark, crc.get()).get("setTransactions", [])}

    def read_whole_table(self) -> None:
        """Make the commit conflict with any concurrent commit that adds or removes rows, as a
        read of every row in this transaction would."""
        self.jtxn.readWholeTable()

    def _metadata(self, properties: Mapping[str, str], drop: Iterable[str], partition_columns: Any = None) -> Any:
        """The snapshot's metadata with ``properties`` set, ``drop`` removed (and new partition
        columns, a Scala sequence), as a new Delta ``Metadata``."""
        meta = self.jtxn.metadata()
        conf = meta.configuration()
        for key in drop:
            conf = getattr(conf, "$minus")(key)
        for key, value in properties.items():
            conf = conf.updated(key, value)
        return meta.copy(meta.id(), meta.name(), meta.description(), meta.format(), meta.schemaString(),
                         partition_columns if partition_columns is not None else meta.partitionColumns(), conf,
                         meta.createdTime())

    def set_properties(self, properties: Mapping[str, str], drop: Iterable[str] = ()) -> None:
        """Change (and remove) table properties in this transaction's commit (a metadata update:
        every concurrent commit to the table then conflicts, so it acts as a fence)."""
        self._actions.add(self._metadata(properties, drop))

    def repartition_table(self, partition_columns: list[str], properties: Mapping[str, str],
                          drop: Iterable[str] = ()) -> None:
        """Change the table's partition columns and properties in this transaction, before its
        files are written (``write`` then lays them out by the new columns); every file must be
        rewritten in the same commit. As any metadata update, every concurrent commit conflicts."""
        jvm = self.spark._jvm
        columns = jvm.java.util.ArrayList()
        for c in partition_columns:
            columns.add(c)
        seq = jvm.scala.collection.JavaConverters.asScalaBuffer(columns).toSeq()
        self._conf = None  # the transaction's metadata is the new one from here on
        try:
            self.jtxn.updateMetadata(self._metadata(properties, drop, seq), False)
        except Exception as exc:
            raise translate(exc) from exc

    def app_version(self, app_id: str) -> int:
        """Latest version committed for ``app_id`` (-1 if none); the commit will conflict if it moves.

        Delta's own ``txnVersion`` registers the dependency and reads the value from the
        reconstructed state; registering it directly (``readTxn``, what ``txnVersion`` adds to)
        keeps the value from the checksum. Conflict detection is the same either way.
        """
        known = self.snapshot_app_versions()
        getattr(self.jtxn.readTxn(), "$plus$eq")(app_id)
        return known.get(app_id, -1)

    def depend_on(self, app_ids: Iterable[str]) -> None:
        """``app_version`` for many ids at once: the commit conflicts if any of them moves. One
        call into the JVM, whatever their number (a group commit depends on dozens)."""
        ids = list(app_ids)
        if not ids:
            return
        listed = jvm(self.spark, "delta.util.JsonUtils.mapper()").readValue(
            json.dumps(ids), jvm(self.spark, "java.util.ArrayList")._java_lang_class)
        getattr(self.jtxn.readTxn(), "$plus$plus$eq")(jvm(self.spark, "scala.collection.JavaConverters.asScalaBuffer")(listed))

    def write(self, data: DataFrame, data_change: bool = True, hold: bool = False) -> list[WrittenFile]:
        """Write ``data`` as files of this transaction (not yet visible); return their stats.
        ``data_change=False``: the files rearrange rows already in the table (compaction), so the
        change feed and streaming readers skip the commit. ``hold``: the files are not part of the
        commit until ``add`` adds them (with tags)."""
        out: list[WrittenFile] = []
        try:
            written = self.jtxn.writeFiles(data._jdf).iterator()
        except Exception as exc:
            raise translate(exc) from exc
        while written.hasNext():
            action = written.next()
            doc = json.loads(action.json())  # Delta's own JSON of the action: one JVM call
            if not data_change and "add" in doc:
                doc["add"]["dataChange"] = False
                action = self._action(doc)
            add = doc.get("add")
            if not (hold and add is not None):
                self._actions.add(action)
            if add is None:
                continue
            out.append(written_file(add, held=hold))
        return out

    def add(self, files: Iterable[WrittenFile], tags: Mapping[str, Mapping[str, str]]) -> None:
        """Add files written with ``hold=True`` to this commit, each with ``tags[path]`` (Delta keeps
        an add action's tags in the log and its checkpoints; delta-rs reads them)."""
        for f in files:
            doc = dict(f.add or {})
            doc["tags"] = {**(doc.get("tags") or {}), **tags.get(f.path, {})}
            self._actions.add(self._action({"add": doc}))

    def data_path(self) -> str:
        return self.jtxn.deltaLog().dataPath().toString()

    def write_rows(self, rows: pa.Table, partition_by: str | None = None,
                   tags: Mapping[str, str] | None = None, data_change: bool = True) -> list[WrittenFile]:
        """Write ``rows`` as Parquet files of this transaction, made by pyarrow and put in place
        through the table's Hadoop file system: no Spark job. A control-plane write is a few rows,
        for which the Spark job cost more than the rows (BENCHMARKS.md, 2026-11-26), and so is a
        small produce. ``partition_by``: the table's partition column; one file per value of
        it, in that value's folder and without the column, as Delta's writer lays them out.

        As Delta's writer would, the rows are made to fit the table's schema first: each column
        cast to the table's type (a value that does not fit raises), absent nullable columns
        null, and a column the table lacks or a null in a NOT NULL column refused, with nothing
        written. Statistics: the row count, null counts, and bounds of integer columns and of
        strings up to Delta's prefix length (no bounds means no skipping, never a wrong one)."""
        if rows.num_rows == 0:
            return []
        schema, required = arrow_schema(self.jtxn.metadata().schemaString())
        data_path = self.jtxn.deltaLog().dataPath().toString()
        parts = split_by(fit_rows(rows, schema, required, data_path), partition_by)
        files = parquet_files(parts, table_stats_columns(self.configuration()), data_change, tags)
        for data, add, _written in files:
            write_file(self.spark, f"{data_path}/{add['path']}", data, in_table=True)
        self._add_parsed([add for _data, add, _written in files], "AddFile")
        return [written for _data, _add, written in files]

    def _add_parsed(self, docs: list[dict], kind: str) -> None:
        """Add actions of Delta's class ``kind`` (``AddFile``, ``RemoveFile``, ``SetTransaction``)
        from their JSON fields, all parsed in one call across py4j, as Delta parses an action (its
        own JSON mapper): one call an action cost about 1-3 ms, a few hundred in a group commit."""
        if not docs:
            return
        mapper = jvm(self.spark, "delta.util.JsonUtils.mapper()")
        collection = per_session(self.spark, f"list of {kind}", lambda: mapper.getTypeFactory().constructCollectionType(
            jvm(self.spark, "java.util.ArrayList")._java_lang_class, jvm(self.spark, f"delta.actions.{kind}")._java_lang_class))
        self._actions.addAll(mapper.readValue(json.dumps(docs), collection))

    def _action(self, doc: dict) -> Any:
        """A Delta action from its JSON (the form Delta writes in commit files)."""
        parser = getattr(getattr(delta(self.spark).actions, "Action$"), "MODULE$")  # Scala's object Action
        return parser.fromJson(json.dumps(doc))

    def file_count(self) -> int:
        """How many data files the snapshot has (from Delta's checksum when it has one: no job)."""
        return int(self.jtxn.snapshot().numOfFiles())

    def files(self) -> list[dict]:
        """Every data file of this transaction's snapshot, as Delta's add actions (path, size,
        partitionValues, stats as JSON text), *without* depending on them: a concurrent append
        does not make the commit conflict; a concurrent removal of a file this commit removes does."""
        return [with_tags(json.loads(text)) for text in self.jtxn.snapshot().allFiles().toJSON().collectAsList()]

    def remove(self, files: Iterable[dict], data_change: bool) -> None:
        """Remove ``files`` (from ``files()``) in this transaction's commit. ``data_change``: their
        records leave the table (retention) rather than move to other files (compaction)."""
        now = int(time.time() * 1000)
        removes = [{"path": f["path"], "deletionTimestamp": now, "dataChange": data_change, "extendedFileMetadata": True,
                    "partitionValues": f.get("partitionValues") or {}, "size": f["size"]} for f in files]
        if not removes:
            return
        self._add_parsed(removes, "RemoveFile")  # 3,200 files a tick at 64 partitions: one call

    def commit_properties(self, properties: Mapping[str, str], drop: Iterable[str] = (),
                          app_versions: Mapping[str, int] | None = None) -> int:
        """One commit that only changes table properties (and sets ``app_versions``), recorded
        as SET TBLPROPERTIES in the table's history."""
        self.set_properties(properties, drop)
        jvm = self.spark._jvm
        jmap = jvm.java.util.HashMap()
        for k, v in properties.items():
            jmap.put(k, v)
        operation = getattr(delta(self.spark), "DeltaOperations$SetTableProperties")(
            jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(jmap))
        return self._commit(app_versions or {}, operation)

    def commit(self, app_versions: Mapping[str, int], user_metadata: str | None = None,
               counters: Mapping[str, int] | None = None) -> int:
        """Commit the written files and set ``app_versions`` (and ``counters``, ids that may fall:
        ``rs_engine.RsTransaction.commit``) in one commit; return the version.

        Recorded as a WRITE (append) with ``user_metadata`` in the commit info, so history shows
        it. (A "Manual Update" operation made Delta recompute the table state on every commit:
        ten times slower.) Raises ConcurrentCommitError on a conflicting concurrent commit.
        """
        none = jvm(self.spark, "scala.Option.empty()")
        meta = jvm(self.spark, "scala.Some")(user_metadata) if user_metadata else none
        write_op = jvm(self.spark, "delta.DeltaOperations$Write")
        # Delta 4.4's WRITE: mode, partitionBy, predicate, userMetadata, then five options unset.
        return self._commit({**(counters or {}), **app_versions},
                            write_op(jvm(self.spark, "org.apache.spark.sql.SaveMode.Append"), none, none,
                                     meta, none, none, none, none, none))

    def commit_as(self, operation: str, app_versions: Mapping[str, int],
                  counters: Mapping[str, int] | None = None) -> int:
        """Commit as Delta's DELETE or OPTIMIZE (what history shows), with ``app_versions`` (and
        ``counters``, as ``commit``'s)."""
        jvm = self.spark._jvm
        nil = getattr(getattr(jvm.scala.collection.immutable, "Nil$"), "MODULE$")
        ops = delta(self.spark)
        if operation == "DELETE":
            op = getattr(ops, "DeltaOperations$Delete")(nil)
        elif operation == "OPTIMIZE":
            op = getattr(ops, "DeltaOperations$Optimize")(nil, nil, False, jvm.scala.Option.empty(), False)
        else:
            raise ValueError(operation)
        # Delta's DELETE and OPTIMIZE report metrics their own commands collect; this commit has
        # none (their absence fails the commit), so history records it without.
        conf = self.spark.conf
        before = conf.get(HISTORY_METRICS_CONF, "true")
        conf.set(HISTORY_METRICS_CONF, "false")
        try:
            return self._commit({**(counters or {}), **app_versions}, op)
        finally:
            conf.set(HISTORY_METRICS_CONF, before)

    def _commit(self, app_versions: Mapping[str, int], operation: Any) -> int:
        now = int(time.time() * 1000)
        self._add_parsed([{"appId": a, "version": int(v), "lastUpdated": now} for a, v in app_versions.items()],
                         "SetTransaction")
        seq = jvm(self.spark, "scala.collection.JavaConverters.asScalaBuffer")(self._actions).toSeq()
        deferred = checkpoints.deferring()
        try:
            version = int(self.jtxn.commit(seq, operation))
        except Exception as exc:  # py4j errors and pyspark's converted Delta exceptions
            raise translate(exc) from exc
        if self._known is not None and version == self.read_version + 1 \
                and len(self._known) + len(app_versions) >= carried_versions.MANY:
            carried_versions.remember(self.path, self.table_id(), version, {**self._known, **app_versions})
        if self._checkpoints_after and self.path is not None:
            interval = int(self.configuration().get("delta.checkpointInterval", "10"))
            if deferred is not None:
                deferred.committed(self.path, version, interval)
            elif checkpoints.checkpoint_due(version, interval):
                try:
                    checkpoints.write_checkpoint(self.spark, self.path)
                except Exception:  # committed all the same; the next interval's checkpoint comes
                    logger.exception("writing the checkpoint of %s at version %s failed", self.path, version)
        return version


@contextmanager
def commit_user_metadata(spark: SparkSession, metadata: str) -> Iterator[None]:
    """Commits Delta's own commands make meanwhile (a ``DELETE``) carry ``metadata`` as their
    commit info's ``userMetadata``."""
    key = "spark.databricks.delta.commitInfo.userMetadata"
    before = spark.conf.get(key, None)
    spark.conf.set(key, metadata)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)


def log_read_directly(spark: SparkSession, path: str) -> tuple[bool, dict[str, str] | None]:
    """Whether the table's log is read here rather than by Delta's JVM, and S3's storage options
    then (from the S3A settings: a session not started stays so). Here on a local disk and on S3,
    where delta-rs commits (``engine_s3``): the commit files are all there is to read. Delta's
    JVM reads the rest: GCS and ADLS, which lakelog reaches through Hadoop's file systems only,
    and S3 on Databricks, whose commit service may hold commits not yet in the log's listing."""
    if not is_remote(path):
        return True, None
    if engine_s3(path):
        return True, s3_storage(spark, path)
    return False, None


def table_version(spark: SparkSession, path: str) -> int:
    """The table's latest version (-1 if there is no table): a listing, no Spark job; on a local
    disk and on S3 without the JVM (``log_read_directly``)."""
    here, storage = log_read_directly(spark, path)
    if here:
        try:
            if storage is None:
                return delta_log.latest_local_version(f"{arrow_filesystem(path)[1]}/_delta_log")
            fs, where = arrow_filesystem(path, storage)
            return delta_log.latest_version(fs, f"{where}/_delta_log")
        except OSError as exc:
            raise StorageError(f"the table at {path} cannot be read ({exc}): is its root lost or not mounted?") from exc
    log = jvm(spark, "delta.DeltaLog.forTable")(spark._jsparkSession, path)
    none = jvm(spark, "scala.Option.empty()")
    return int(log.update(False, none, none).version())


def app_version_changes(spark: SparkSession, path: str, since: int, prefix: str) -> dict[str, tuple[int, int | None]]:
    """Latest (version, lastUpdated ms of the writer's clock) of each application id starting with
    ``prefix`` set in commits after ``since``, read from the commit files themselves: no Spark
    job, no state reconstruction (on a local disk and on S3, no JVM either: ``log_read_directly``)."""
    here, storage = log_read_directly(spark, path)
    if here:
        fs, where = arrow_filesystem(path, storage)
        return delta_log.app_version_changes(fs, f"{where}/_delta_log", since, table_version(spark, path), prefix)[0]
    found: dict[str, tuple[int, int | None]] = {}

    def take(txn: dict) -> None:
        if txn is not None and txn["appId"].startswith(prefix):
            updated = txn.get("lastUpdated")
            found[str(txn["appId"])] = (int(txn["version"]), int(updated) if updated is not None else None)

    log = delta(spark).DeltaLog.forTable(spark._jsparkSession, path)
    changes = log.getChanges(since + 1, spark._jvm.scala.Option.empty(), False)
    while changes.hasNext():
        actions = spark._jvm.scala.collection.JavaConverters.seqAsJavaList(changes.next()._2())
        for i in range(actions.size()):  # by index: a py4j iterator ends in a converted Java exception
            take(json.loads(actions.get(i).json()).get("txn"))
    return found


def app_versions(spark: SparkSession, path: str) -> dict[str, int]:
    """All application transaction versions of a table's latest snapshot (on a local disk and on
    S3 through delta-rs's transaction: no JVM; ``log_read_directly``)."""
    here, storage = log_read_directly(spark, path)
    if here:
        from log_store.rs_engine import RsTransaction

        if table_version(spark, path) < 0:
            return {}
        txn = RsTransaction.start(path, storage)
        try:
            return txn.snapshot_app_versions()
        finally:
            txn.release()
    return DeltaTransaction.start(spark, path).snapshot_app_versions()
