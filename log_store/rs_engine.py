"""A fenced transaction on one Delta table through delta-rs's public API: no JVM, no Delta internals.

The shape is ``log_store.engine.DeltaTransaction``'s: start on the newest snapshot, read its
metadata and application versions (set transactions) *inside* the transaction, write Parquet files
(pyarrow), commit them with new application versions. The fence keeps Delta's meaning: the commit
is rejected (``ConcurrentCommitError``; ``AppVersionConflictError`` for an id) when, since the read
version, another commit changed the metadata or protocol, or set an application id this
transaction read (``app_version``, ``depend_on``) or sets; with ``read_whole_table``, also when it
added or removed data; and when it removed a file this one removes. Any other commit that won the
race is passed over, as Delta rebases a commit that does not conflict. How a lost race is told
from a commit that landed: ``log_store.rs_races``; making a table: ``log_store.rs_create``.

Commit shapes delta-rs's public API cannot express in one commit, and what this module does:

- table properties with files, a change of the partition columns (the layout move), change data
  files (``cdc`` actions: the deletes a rewrite of an arrival log's shared files writes): the
  commit file is written by lakelog (``log_store.commit_files``), put-if-absent as delta-rs
  writes its own, with the same answer to a lost race, so the same conflict rules apply. Such a
  commit names itself ``lakelog`` in ``engineInfo`` and carries Delta's operation name.
- property removal: delta-rs has no UNSET (delta-io/delta-rs#2073). A property-only commit
  through delta-rs sets a dropped one to the empty string, which ``configuration`` reads as
  absent (other readers see ``key = ''``); a commit lakelog writes removes it. ``delta.*``
  properties cannot be dropped.
- custom properties at creation (refused by delta-rs's parser): ``rs_create.create_table`` makes
  a local table as ``log_store.table_create`` does (version 0 written by lakelog); elsewhere through
  delta-rs with its ``delta.*`` properties, then the others in a second commit.
- tags on add actions: ``AddAction`` has none. They are kept in the file's statistics JSON under
  ``lakelog.tags`` (delta-rs and Delta's readers ignore keys they do not know, and checkpoints
  keep the JSON as written); ``files`` puts them back in ``tags``.
- Delta's operation names (DELETE, OPTIMIZE): a delta-rs commit's history shows WRITE (or SET
  TBLPROPERTIES); the name given to ``commit`` is kept in the commit info as ``lakelog.operation``.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, CommitProperties, PostCommitHookProperties, RemoveAction, Transaction

from log_store import app_versions as carried_versions
from log_store import checkpoints, commit_files, delta_log, rs_races, rs_tables
from log_store.arrow_files import (TAGS_KEY, WrittenFile, arrow_schema, fit_rows, parquet_files, split_by, stats_columns,
                                  with_tags, written_file)
from log_store.delta_errors import conflict_error, translate
from log_store.errors import InvalidConfigurationError, LakelogError, StorageError
from log_store.files import is_remote, write_file
from log_store.object_store import arrow_filesystem

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from log_store import spark_files

Storage = Mapping[str, str] | None
logger = logging.getLogger("lakelog.rs_engine")
class RsTransaction:
    """One open optimistic transaction on a Delta table (see module docstring)."""

    def __init__(self, path: str, table: DeltaTable, storage: Storage = None) -> None:
        self.path = path
        self._table: DeltaTable | None = table  # lent by rs_tables until the commit
        self._storage = storage
        self._fs, self._root = arrow_filesystem(path, storage)
        self.read_version = table.version()
        self._metadata = table.metadata()
        self._schema_json = table.schema().to_json()
        self._depends: set[str] = set()
        self._whole_table = False
        self._actions: list[AddAction | RemoveAction] = []
        self._removing: set[str] = set()
        self._properties: dict[str, str] = {}
        self._partition_columns: list[str] | None = None  # a change of them (``repartition_table``)
        self._cdc: list[dict] = []  # change data files (``write_changes``)
        self._known: dict[str, int] | None = None  # every application version of the read version
        self._read: dict[str, int] = {}  # those read one by one (a remote table)
        self._txn_id = str(uuid.uuid4())  # in the commit info: tells this commit from others

    @classmethod
    def start(cls, path: str, storage: Storage = None) -> "RsTransaction":
        """A transaction on the newest snapshot of the table at ``path`` (``StorageError`` if none)."""
        return cls(path, rs_tables.borrow(path, storage), storage)

    @property
    def storage(self) -> dict[str, str] | None:
        """The store's options the table was opened with (None: a local table, or the environment's)."""
        return dict(self._storage) if self._storage else None

    # -- reads inside the transaction -------------------------------------------------------------
    def table_id(self) -> str:
        """The table's id: a UUID given at creation, never reused."""
        return self._metadata.id

    def writer_features(self) -> set[str]:
        """The table features a writer of this table must support."""
        return set(self._open().protocol().writer_features or [])

    def configuration(self) -> dict[str, str]:
        """The table properties as of the read version; a dropped property (empty) is absent."""
        return {k: v for k, v in self._metadata.configuration.items() if v != ""}

    def schema_json(self) -> str:
        return self._schema_json

    def snapshot_app_versions(self) -> dict[str, int]:
        """Every application version of the read version, *without* depending on them. From those
        this process kept of an earlier version and the commit files since (a local table), else
        from the last checkpoint and the commits after it."""
        if self._known is None:
            self._known = carried_versions.of_version(self.path, self.table_id(), self.read_version, self._fs,
                                                      self._log)
        return dict(self._known)

    def app_version(self, app_id: str) -> int:
        """The version committed for ``app_id`` (-1 if none); the commit conflicts if it moves.
        On a local table from ``snapshot_app_versions`` (one commit file read, once this process
        has read the table); on a remote one from delta-rs, about 1-3 ms an id."""
        self._depends.add(app_id)
        if self._known is None and not is_remote(self.path):
            self.snapshot_app_versions()
        if self._known is not None:
            return self._known.get(app_id, -1)
        if app_id not in self._read:
            version = self._open().transaction_version(app_id)
            self._read[app_id] = -1 if version is None else int(version)
        return self._read[app_id]

    def depend_on(self, app_ids: Iterable[str]) -> None:
        """The commit conflicts if any of ``app_ids`` moves."""
        self._depends.update(app_ids)

    def read_whole_table(self) -> None:
        """The commit conflicts with any concurrent commit that adds or removes rows."""
        self._whole_table = True

    def file_stats(self) -> pa.Table:
        """The read version's data files, one row each: ``path``, ``num_records`` and the statistics
        flattened (``min.<column>``, ``max.<column>``), from delta-rs's state in memory (no log read)."""
        return pa.RecordBatchReader.from_stream(self._open().get_add_actions(flatten=True)).read_all()

    def files(self) -> list[dict]:
        """Every data file of the read version as Delta's add action (tags included), *without*
        depending on them; a concurrent removal of one this commit removes conflicts."""
        found = delta_log.replay(self._fs, self._log, self.read_version, with_files=True).files or {}
        return [with_tags(add) for add in found.values()]

    # -- changes ----------------------------------------------------------------------------------
    def write_rows(self, rows: pa.Table, partition_by: str | None = None, tags: Mapping[str, str] | None = None,
                   data_change: bool = True) -> list[WrittenFile]:
        """Write ``rows`` as Parquet files of this transaction (not visible until the commit), laid
        out by the table's partition column as Delta's writer would, made to fit its schema first
        (``arrow_files.fit_rows``); each file with Delta's statistics and ``tags``. ``partition_by``
        (``engine.DeltaTransaction``'s argument) must name the table's own partition column."""
        if rows.num_rows == 0:
            return []
        schema, required = arrow_schema(self.schema_json())
        columns = self._partitions()
        if len(columns) > 1:
            raise LakelogError(f"the table at {self.path} is partitioned by {columns}: lakelog writes one column only")
        if partition_by is not None and [partition_by] != columns:
            raise LakelogError(f"the table at {self.path} is partitioned by {columns or 'nothing'}, not {partition_by}; "
                               "nothing was written")
        parts = split_by(fit_rows(rows, schema, required, self.path), columns[0] if columns else None)
        files = parquet_files(parts, stats_columns(self._pending_configuration()), data_change, dict(tags or {}))
        for data, add, _written in files:
            self._put(add["path"], data)
        self.add_files([add for _data, add, _written in files])
        return [written for _data, _add, written in files]

    def write(self, data: "DataFrame", data_change: bool = True, hold: bool = False,
              tags_of: "spark_files.TagsOf | None" = None) -> list[WrittenFile]:
        """Write ``data``'s rows as files of this transaction in one Spark job, each task its own
        files (``spark_files``), laid out and described as ``write_rows`` does; ``tags_of`` gives a
        file's tags from its rows, in the task. ``hold``: the files join the commit only through
        ``add`` (``engine.DeltaTransaction``'s arguments)."""
        from log_store import spark_files

        columns = self._partitions()
        adds = spark_files.write_frame(data, self.path, self.schema_json(), columns[0] if columns else None,
                                       stats_columns(self._pending_configuration()), data_change, tags_of,
                                       self._storage)
        if not hold:
            self.add_files(adds)
        return [written_file(add, held=True) for add in adds]

    def add(self, files: Iterable[WrittenFile], tags: Mapping[str, Mapping[str, str]]) -> None:
        """Add files written with ``hold=True``, each with ``tags[path]`` besides its own."""
        self.add_files({**f.add, "tags": {**(f.add.get("tags") or {}), **tags.get(f.path, {})}} for f in files)

    def column(self, name: str):
        """The table's column ``name`` (a Spark ``StructField``: type, nullability) as of the read version."""
        from pyspark.sql.types import StructType

        return StructType.fromJson(json.loads(self._schema_json))[name]

    def column_type(self, name: str):
        """The Spark type of the table's column ``name`` as of the read version."""
        return self.column(name).dataType

    def add_files(self, adds: Iterable[dict]) -> None:
        """Add files already in the table's folder (written by Spark's tasks, or ``write_rows``),
        given as Delta's add actions; their ``tags`` go into the statistics (``TAGS_KEY``)."""
        for add in adds:
            stats = json.loads(add.get("stats") or "{}")
            if add.get("tags"):
                stats[TAGS_KEY] = dict(add["tags"])
            self._actions.append(AddAction(add["path"], int(add["size"]), dict(add.get("partitionValues") or {}),
                                           int(add["modificationTime"]), bool(add.get("dataChange", True)),
                                           json.dumps(stats)))

    def remove(self, files: Iterable[dict], data_change: bool) -> None:
        """Remove ``files`` (from ``files()``) in this commit. ``data_change``: their records leave
        the table (retention) rather than move to other files (compaction)."""
        now = int(time.time() * 1000)
        for f in files:
            self._actions.append(RemoveAction(f["path"], data_change, now, int(f["size"]),
                                              dict(f.get("partitionValues") or {})))
            self._removing.add(f["path"])

    def set_properties(self, properties: Mapping[str, str], drop: Iterable[str] = ()) -> None:
        """Change (and drop) table properties in this commit: a metadata change, so every
        concurrent commit to the table conflicts; it cannot carry files (module docstring)."""
        dropped = list(drop)
        if any(k.startswith("delta.") for k in dropped) or "" in properties.values():
            raise InvalidConfigurationError("a Delta property cannot be dropped, nor any set to the empty string, "
                                            "through delta-rs (the empty string marks a dropped property)")
        self._properties.update(properties)
        self._properties.update({k: "" for k in dropped if k in self._metadata.configuration})

    def repartition_table(self, partition_columns: list[str], properties: Mapping[str, str],
                          drop: Iterable[str] = ()) -> None:
        """Change the partition columns (and properties) in this commit; files written after this
        are laid out by the new ones (the layout move: ``engine.DeltaTransaction``'s method)."""
        self._partition_columns = list(partition_columns)
        self.set_properties(properties, drop)

    def write_changes(self, rows: pa.Table, change_type: str) -> None:
        """Rows of the change feed this commit writes as change data files (Delta's ``cdc``
        actions; ``_change_type`` = ``change_type``): deletes a rewrite of shared files makes,
        as Delta's DELETE writes them. Read by the change feed in place of the commit's files."""
        if rows.num_rows == 0:
            return
        schema, required = arrow_schema(self.schema_json())
        for partition_values, part in split_by(fit_rows(rows, schema, required, self.path), (self._partitions() or [None])[0]):
            part = part.append_column("_change_type", pa.array([change_type] * part.num_rows, pa.string()))
            for data, add, _written in parquet_files([(partition_values, part)], frozenset(), False):
                name = "_change_data/" + add["path"].replace("part-", "cdc-", 1)
                self._put(name, data)
                self._cdc.append({"cdc": {"path": name, "partitionValues": partition_values, "size": len(data),
                                          "dataChange": False}})

    def _partitions(self) -> list[str]:
        return self._metadata.partition_columns if self._partition_columns is None else self._partition_columns

    def _pending_configuration(self) -> dict[str, str]:
        """The table properties as this commit leaves them."""
        return {k: v for k, v in {**self._metadata.configuration, **self._properties}.items() if v != ""}

    def commit_as(self, operation: str, app_versions: Mapping[str, int], counters: Mapping[str, int] | None = None) -> int:
        """Commit, naming Delta's ``operation`` (DELETE, OPTIMIZE) in the commit's metadata
        (``engine.DeltaTransaction``'s method; delta-rs records the commit itself as a WRITE)."""
        return self.commit(app_versions, operation=operation, counters=counters)

    def file_count(self) -> int:
        """How many data files the snapshot has."""
        return len(self._open().file_uris())

    def commit_properties(self, properties: Mapping[str, str], drop: Iterable[str] = (),
                          app_versions: Mapping[str, int] | None = None) -> int:
        """One commit that only changes table properties (and sets ``app_versions``), recorded as
        SET TBLPROPERTIES in the table's history (``engine.DeltaTransaction``'s method)."""
        self.set_properties(properties, drop)
        return self.commit(app_versions)

    # -- the commit -------------------------------------------------------------------------------
    def commit(self, app_versions: Mapping[str, int] | None = None, user_metadata: str | None = None,
               operation: str | None = None, counters: Mapping[str, int] | None = None) -> int:
        """Commit the changes and set ``app_versions`` in one commit; return its version.
        ``counters``: application ids set as they are, free to fall (liveness ticks, a stream
        batch's digest: read as "changed", never as "rose"), depended on only if read or named
        in ``depend_on``. Raises lakelog's conflict errors
        (retry from a fresh read), or ``LakelogError`` for a version that would fall or a shape
        delta-rs cannot commit, with nothing committed."""
        versions = {a: int(v) for a, v in (app_versions or {}).items()}
        for app_id, version in versions.items():
            before = self.app_version(app_id)  # the commit depends on every id it sets
            if version < before:
                raise LakelogError(f"the application version of {app_id} would fall from {before} to {version}; "
                                   "nothing was committed")
        versions |= {a: int(v) for a, v in (counters or {}).items() if a not in versions}
        now = int(time.time() * 1000)
        info = {"txnId": self._txn_id, "readVersion": self.read_version}
        info |= {"userMetadata": user_metadata} if user_metadata else {}
        info |= {"lakelog.operation": operation} if operation else {}
        props = CommitProperties(custom_metadata=info, max_commit_retries=0,
                                 app_transactions=[Transaction(a, v, now) for a, v in versions.items()])
        if (self._properties and self._actions) or self._partition_columns is not None or self._cdc:
            props = commit_files.OwnCommit(info, versions, now, operation)  # a shape delta-rs cannot commit
        base, moved = self.read_version, {}
        try:
            while True:
                try:
                    self._commit_at(props)
                    version = base + 1
                    break
                except CommitFailedError as exc:
                    won = rs_races.winners(self._open(), self._fs, self._log, self.path, base, exc)
                except LakelogError as exc:  # the store, or a step after the commit (delta-rs's checkpoint)
                    landed = rs_races.landed(self._fs, self._log, base, self._txn_id)
                    if landed is None:
                        rs_races.check_reachable(self._fs, self._log, self.path, exc)
                        raise
                    version = landed
                    break
                base += len(won)
                moved |= {a["txn"]["appId"]: int(a["txn"]["version"]) for _v, acts in won for a in acts if "txn" in a}
                mine = next((v for v, actions in won if rs_races.txn_id(actions) == self._txn_id), None)
                if mine is not None:  # it landed; its answer was lost
                    version = mine
                    break
                for _v, actions in won:
                    name = commit_files.conflict(actions, self._depends, self._removing, self._whole_table)
                    if name:
                        raise conflict_error(name)
            self._checkpoint(version)
        finally:
            self.release()  # the table, for the next transaction on it
        if self._known is not None and version == base + 1:  # every commit since the read was read
            carried_versions.remember(self.path, self.table_id(), version, {**self._known, **moved, **versions})
        return version

    def _commit_at(self, props: CommitProperties) -> None:
        """One try at the version after the table object's snapshot; the checkpoint is left to
        ``_checkpoint`` (delta-rs would write it inside the commit)."""
        hooks = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
        if isinstance(props, commit_files.OwnCommit):
            if not commit_files.write_commit(self.path, self._storage, self._open().version() + 1, self._own_actions(props)):
                raise CommitFailedError("the version exists: another commit won the race")
            return
        try:
            if self._properties:
                self._open().alter.set_table_properties(self._properties, raise_if_not_exists=False,
                                                       commit_properties=props, post_commithook_properties=hooks)
            else:
                self._open().create_write_transaction(self._actions, "append", self._open().schema(),
                                                     self._metadata.partition_columns, commit_properties=props,
                                                     post_commithook_properties=hooks)
        except CommitFailedError:
            raise
        except Exception as exc:
            raise translate(exc) from exc

    def _own_actions(self, own: "commit_files.OwnCommit") -> list[dict]:
        """This commit as the lines of its commit file: its metadata with the properties and
        partition columns it leaves, its application versions, then its files."""
        changed = bool(self._properties) or self._partition_columns is not None
        return commit_files.commit_lines(own, self._metadata, self._schema_json, self._partitions(),
                                         self._pending_configuration() if changed else None, self._actions + self._cdc)

    def _checkpoint(self, version: int) -> None:
        """The checkpoint due at ``version`` (the table's interval): left to the calling thread's
        deferral (a server's pool: ``log_store.checkpoints``), else written now, as Delta writes
        it in the commit that reaches the interval. A failure leaves it to the next interval."""
        interval = int(self.configuration().get("delta.checkpointInterval", "100"))
        if not checkpoints.checkpoint_due(version, interval):
            return
        deferred = checkpoints.deferring()
        if deferred is not None:
            deferred.committed(self.path, version, interval)
            return
        try:
            table = self._open()
            table.update_incremental()
            table.create_checkpoint()
            table.cleanup_metadata()
        except Exception:  # noqa: BLE001 - committed all the same
            logger.exception("writing the checkpoint of %s at version %s failed", self.path, version)

    def release(self) -> None:
        """End a transaction that only read: its table is kept for the next one (it cannot commit)."""
        if self._table is not None:
            table, self._table = self._table, None
            rs_tables.give_back(self.path, self._storage, table)

    def _open(self) -> DeltaTable:
        if self._table is None:
            raise LakelogError("this transaction has committed (or failed to); start another")
        return self._table

    @property
    def _log(self) -> str:
        return f"{self._root}/_delta_log"

    def _put(self, name: str, data: bytes) -> None:
        """A data file in the table's folder (which must exist: a lost root is a StorageError)."""
        if not is_remote(self.path):
            write_file(None, f"{self._root}/{name}", data, in_table=True)
            return
        try:
            with self._fs.open_output_stream(f"{self._root}/{name}") as out:
                out.write(data)
        except OSError as exc:
            raise StorageError(f"cannot write {self.path}/{name}: {exc}; nothing was committed") from exc
