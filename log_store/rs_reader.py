"""Reading lakelog's Delta tables without a JVM (delta-rs), for the read-only commands.

A command such as ``topics list`` needs a few small reads; starting Spark's JVM for them takes
longer than the reads. delta-rs reads the same tables: rows, table properties, set-transaction
versions (the log ends) and the table id. Only reads: every write stays with Spark and Delta's
own transactions.

delta-rs reads object stores itself (``s3://``, ``s3a://``, ``gs://``, ``abfss://``, ...), with
credentials from the environment (``AWS_*``, ``AZURE_*``, ``GOOGLE_*``) or from ``storage``:
delta-rs storage options, passed to every read of a table. They do not apply to local paths.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder
from deltalake.exceptions import TableNotFoundError

from log_store import delta_log
from log_store.errors import StorageError
from log_store.files import is_remote, local_path
from log_store.names import cleaned_app_id, high_watermark_app_id, log_end_app_id, log_start_app_id
from log_store.timestamp_types import TimestampTypes
from log_store.txn_marks import CONTROL_COLUMN, marks_by_partition
from log_store.txn_reads import MARKER_COLUMNS, no_markers, records_predicate
from log_store.log_metadata import (
    TOPIC_VERSION_PROP, LogSnapshot, TopicLogMetadata, check_set_transactions_kept, cleaned_offsets, epoch_ends_of,
    kept_high_watermark, layout_of, log_end, log_starts, topic_id_of,
)


Storage = Mapping[str, str] | None
# Object stores delta-rs reads (the Hadoop spelling s3a:// included); dbfs:/ is not one of them.
SCHEMES = ("s3", "s3a", "gs", "abfs", "abfss", "az", "azure")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@contextmanager
def _remote_errors(path: str) -> Iterator[None]:
    """A remote read that fails (endpoint, bucket, credentials) as a ``StorageError`` naming the
    table; delta-rs's own message follows on one line."""
    if not is_remote(path):
        yield
        return
    try:
        yield
    except TableNotFoundError:
        raise
    except Exception as exc:
        cause = ": ".join(line.strip(" ↳") for line in _ANSI.sub("", str(exc)).splitlines() if line.strip(" ↳"))
        raise StorageError(
            f"cannot read the Delta table at {path} with delta-rs: {cause[:600]}; check the store's endpoint, "
            "bucket and credentials (delta-rs takes them from the environment, AWS_*, AZURE_* or GOOGLE_*, "
            "or from storage options)") from None


def _open(path: str, version: int | None = None, storage: Storage = None) -> DeltaTable | None:
    """The table at ``path`` as of ``version`` (default: the latest); None if there is none."""
    if not is_remote(path):
        return DeltaTable(path, version=version) if Path(path, "_delta_log").is_dir() else None
    with _remote_errors(path):
        try:
            return DeltaTable(path, version=version, storage_options=dict(storage) if storage else None)
        except TableNotFoundError:
            return None


def _table(path: str, version: int | None = None, storage: Storage = None) -> DeltaTable:
    """The table at ``path``, which must exist (``StorageError`` if it does not: a lost or
    unmounted root, a path that was never a table)."""
    table = _open(path, version, storage)
    if table is None:
        raise StorageError(f"no Delta table at {path}{'' if version is None else f' (version {version})'}: is its "
                           "root lost or not mounted?")
    return table


def exists(path: str, storage: Storage = None) -> bool:
    if is_remote(path):
        return _open(path, storage=storage) is not None
    return Path(path, "_delta_log").is_dir()


def rows(path: str, version: int | None = None, storage: Storage = None) -> list[dict]:
    """Every row of the table at ``path`` (none if there is no table), as of ``version`` (default:
    the latest). Maps come as lists of (key, value) pairs, as Arrow has them."""
    table = _open(path, version, storage)
    if table is None:
        return []
    # Through delta-rs's query engine, not to_pyarrow_table(): with deltalake 1.6.6 and pyarrow 17
    # a process that scanned a pyarrow dataset aborts at exit about half the time ("terminate
    # called without an active exception", exit 134), which would fail a read command.
    return _scan(path, table, "SELECT * FROM t").to_pylist()


def arrow(path: str, version: int | None = None, storage: Storage = None) -> pa.Table:
    """The rows of the table at ``path`` (as of ``version``, default the latest) as an Arrow table."""
    return _scan(path, _table(path, version, storage), "SELECT * FROM t")


def columns_at(path: str, version: int | None, columns: list[str], storage: Storage = None) -> pa.Table:
    """``columns`` of every row of the table at ``path`` as of ``version``."""
    return _scan(path, _table(path, version, storage), "SELECT " + ", ".join(f'"{c}"' for c in columns) + " FROM t")


def log_ranges(path: str, version: int, ranges: Mapping[int, tuple[int, int]], columns: list[str] | None = None,
               storage: Storage = None, records_only: bool = False, exclude: str | None = None) -> pa.Table:
    """The rows of a topic log in [start, end) of each partition, as of ``version``
    (``columns``, default all), by partition and offset, typed as the table is: a small read
    without a Spark job (Spark's read at a version rebuilds that version's state). Through delta-rs's
    query engine, as ``rows`` reads, not a pyarrow dataset scan: a process that scanned one may
    abort at exit ("terminate called without an active exception"). ``records_only``: no
    transaction markers (``txn_reads``); ``exclude``: a predicate (DataFusion's SQL) of rows left out."""
    table = _table(path, version, storage)  # opened once: its schema, then the query
    schema = pa.schema(table.schema().to_arrow())
    wanted = pa.schema([schema.field(name) for name in (columns or schema.names)])
    if not ranges:
        return wanted.empty_table()
    spans = [(p, start, end) for p, (start, end) in sorted(ranges.items())]
    more = [f"NOT ({exclude})"] if exclude else []
    if records_only and CONTROL_COLUMN in schema.names:
        more.append(records_predicate())
    return _scan(path, table, _ranges_sql(spans, wanted.names, more)).cast(wanted)


def log_markers(path: str, version: int, ranges: Mapping[int, tuple[int, int]], storage: Storage = None) -> pa.Table:
    """The transaction markers (partition, offset, producer_id, control) of a topic log in [start,
    end) of each partition, as of ``version``: none in a log without the control column."""
    table = _table(path, version, storage)
    if CONTROL_COLUMN not in table.schema().to_arrow().names or not ranges:
        return no_markers()
    spans = [(p, start, end) for p, (start, end) in sorted(ranges.items())]
    return _scan(path, table, _ranges_sql(spans, MARKER_COLUMNS, [f'"{CONTROL_COLUMN}" IS NOT NULL']))


def arrow_table(found) -> pa.Table:
    """What delta-rs returned (an Arrow stream or table of its own Arrow library) as a pyarrow
    table, through the Arrow C interface: ``pa.table`` would first import pandas to ask whether it
    was given a DataFrame (about 0.35 s of every CLI command's start)."""
    if hasattr(found, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(found).read_all()
    return pa.table(found)


def _scan(path: str, table: DeltaTable, sql: str) -> pa.Table:
    with _remote_errors(path):
        return arrow_table(QueryBuilder().register("t", table).execute(sql))


class FastReadUnavailable(Exception):
    """delta-rs cannot answer this read the way Spark would (old commit files cleaned up, rows
    changed in place): the caller reads with Spark instead."""


def version(path: str, storage: Storage = None) -> int:
    """The table's latest version (-1 if there is no table)."""
    table = _open(path, storage=storage)
    return -1 if table is None else table.version()


def row_tracked(path: str, storage: Storage = None) -> bool:
    """Whether the table at ``path`` tracks rows (``delta.enableRowTracking``)."""
    table = _open(path, storage=storage)
    return table is not None and table.metadata().configuration.get("delta.enableRowTracking") == "true"


def rows_in_commit_order(path: str, label: str = "commit_order", storage: Storage = None) -> list[dict]:
    """Every row of an append-only table with ``_order``: its place in commit order.

    A table whose rows carry a ``label`` column (control_plane.tables explains it) is ordered by
    it. One made before it, with row tracking, is ordered by the version that committed each
    row: Spark reads that as ``_metadata.row_commit_version``; delta-rs has no such column, but
    an appended row's change-feed entry carries the same version. That is read from the change
    feed since version 0, so it needs every commit file: when old ones were cleaned up (log
    retention), or a row was ever changed in place, FastReadUnavailable.
    """
    if not exists(path, storage):
        return []
    if not row_tracked(path, storage):
        return [{**r, "_order": r[label]} for r in rows(path, storage=storage)]
    try:
        feed = arrow_table(_table(path, storage=storage).load_cdf(starting_version=0))
    except Exception as exc:  # delta-rs raises several kinds for missing commit files
        raise FastReadUnavailable(f"the change feed of {path} is not complete: {exc}") from None
    out = []
    for row in feed.to_pylist():
        if row.pop("_change_type") != "insert":
            raise FastReadUnavailable(f"{path} has rows changed in place; only appends are read without Spark")
        row.pop("_commit_timestamp", None)
        row["_order"] = row.pop("_commit_version")
        out.append(row)
    return out


def app_version_changes(path: str, since: int, prefix: str, storage: Storage = None) -> dict[str, tuple[int, int | None]]:
    """As ``log_store.engine.app_version_changes``: the latest (version, writer's ms) of each
    application id starting with ``prefix`` set by commits after ``since``, read from the commit
    files of a local or S3 table (``FastReadUnavailable`` if some were cleaned up)."""
    from log_store.object_store import arrow_filesystem

    fs, where = arrow_filesystem(path, storage)
    log = f"{where}/_delta_log"
    with _remote_errors(path):
        found, missing = delta_log.app_version_changes(fs, log, since, delta_log.latest_version(fs, log), prefix)
    if missing:
        raise FastReadUnavailable(f"commit {missing[0]} of {path} was cleaned up")
    return found


APPEND_ACTIONS = frozenset({"add", "txn", "commitInfo"})


def only_appends(path: str, first: int, last: int) -> bool:
    """Whether versions ``first``..``last`` of the local table at ``path`` only added files (each
    commit's actions are ``add``, ``txn`` and ``commitInfo``: no file removed, no metadata or
    protocol changed), so every row the table held before them is still there, unchanged. False if
    a commit file is missing (cleaned up) or the table is not local."""
    if is_remote(path) or first > last:
        return not is_remote(path) and first > last
    log = local_path(path) / "_delta_log"
    for v in range(first, last + 1):
        try:
            lines = (log / f"{v:020d}.json").read_text().splitlines()
        except OSError:
            return False
        for line in lines:
            if line.strip() and not json.loads(line).keys() <= APPEND_ACTIONS:
                return False
    return True


def log_snapshot(path: str, version: int | None = None, storage: Storage = None,
                 marks: bool = False) -> tuple[LogSnapshot, str]:
    """A topic log's snapshot (metadata and log ends, as ``TopicLog.snapshot`` reads them) and its
    table id, as of ``version`` (default: the latest). ``marks``: with its transaction marks
    (``LogSnapshot.txn_marks``, for ``stable_end``): every application version of the snapshot."""
    snap, topic_id, _conf = log_view(path, version, storage, marks)
    return snap, topic_id


def log_view(path: str, version: int | None = None, storage: Storage = None, marks: bool = False
             ) -> tuple[LogSnapshot, str, dict[str, str]]:
    """``log_snapshot`` with the log's table properties (a replica's role and epochs among them)."""
    table = _table(path, version, storage)
    meta = table.metadata()
    conf = {k: v for k, v in meta.configuration.items() if v != ""}  # empty: dropped through delta-rs
    check_set_transactions_kept(conf, path)
    metadata = TopicLogMetadata.from_properties(conf)
    known = {}
    for app_id in [high_watermark_app_id(None), *(a for p in metadata.partitions
                                                  for a in (log_end_app_id(p), log_start_app_id(p),
                                                            cleaned_app_id(p), high_watermark_app_id(p)))]:
        version = table.transaction_version(app_id)
        if version is not None:
            known[app_id] = version
    snap = LogSnapshot(
        version=table.version(), topic_version=int(conf.get(TOPIC_VERSION_PROP, "1")), metadata=metadata,
        log_ends={p: log_end(known, p, pm.start_offset) for p, pm in metadata.partitions.items()},
        log_starts=log_starts(known, metadata.partitions), cleaned=cleaned_offsets(known, metadata.partitions),
        layout=layout_of(conf),
        timestamp_types=TimestampTypes.of(conf), **kept_high_watermark(known, metadata.partitions),
        txn_marks=_txn_marks(path, table, storage) if marks else None,
        epoch_ends=epoch_ends_of(conf, metadata.partitions),
    )
    return snap, topic_id_of(conf, meta.id), conf


def _txn_marks(path: str, table: DeltaTable, storage: Storage) -> dict[int, dict[str, int]]:
    """The transaction marks of ``table``'s version: among all its application versions, which
    delta-rs names one by one only (``app_versions.of_version`` reads them all)."""
    from log_store import app_versions
    from log_store.errors import InvalidConfigurationError
    from log_store.object_store import arrow_filesystem, is_s3

    if is_remote(path) and not is_s3(path):
        raise InvalidConfigurationError(
            f"{path}: a read_committed read finds open transactions in the log's commit files, which lakelog reads "
            "on local and S3 roots only; read this log with isolation level read_uncommitted")
    fs, root = arrow_filesystem(path, storage)
    with _remote_errors(path):
        known = app_versions.of_version(path, table.metadata().id, table.version(), fs, f"{root}/_delta_log")
    return marks_by_partition(known)


def _query(path: str, version: int | None, sql: str, storage: Storage = None) -> pa.Table:
    return _scan(path, _table(path, version, storage), sql)


def end_after_records(path: str, version: int, partition: int, start: int, end: int, records: int,
                      storage: Storage = None) -> int:
    """As ``TopicLog.end_after_records``: the offset after the first ``records`` records of
    ``partition`` from ``start`` (``end`` if fewer lie below it)."""
    out = _query(path, version, f'SELECT "offset" AS o FROM t WHERE "partition" = {int(partition)} AND "offset" >= '
                                f'{int(start)} AND "offset" < {int(end)} ORDER BY "offset" LIMIT {int(records)}', storage)
    found = out.column("o").to_pylist()
    return end if len(found) < records else int(found[-1]) + 1


def first_offsets(path: str, version: int, spans: list[tuple[int, int, int]], storage: Storage = None
                  ) -> dict[int, int]:
    """As ``TopicLog.first_offsets``: each (partition, start, end)'s first offset in [start, end)
    the log holds (``end`` if none), in one query."""
    if not spans:
        return {}
    where = " OR ".join(f'("partition" = {int(p)} AND "offset" >= {int(s)} AND "offset" < {int(e)})' for p, s, e in spans)
    out = _query(path, version, f'SELECT "partition" AS p, min("offset") AS o FROM t WHERE {where} GROUP BY "partition"',
                 storage)
    found = dict(zip(out.column("p").to_pylist(), out.column("o").to_pylist()))
    return {p: e if found.get(p) is None else int(found[p]) for p, _s, e in spans}


def last_offset_of_epoch(path: str, partition: int, epoch: int, version: int | None = None,
                         storage: Storage = None) -> int:
    """As ``TopicLog.last_offset_of_epoch``: the largest offset of ``partition`` with
    ``leader_epoch <= epoch`` in the log at ``path``; -1 if none (rule 3)."""
    out = _query(path, version, f'SELECT max("offset") AS o FROM t WHERE "partition" = {int(partition)} '
                                f"AND leader_epoch <= {int(epoch)}", storage)
    value = out.column("o")[0].as_py() if out.num_rows else None
    return -1 if value is None else int(value)


def offset_ranges(path: str, version: int, spans: list[tuple[int, int, int]], columns: list[str],
                  storage: Storage = None, controls: bool = False) -> pa.Table:
    """The rows with offsets in [start, end) of each (partition, start, end) in ``spans``, by
    partition and offset, as of the log's ``version``: ``columns`` of the record schema, and with
    ``controls`` the ``control`` column where the log has it (set on transaction markers). Files of
    other partitions or outside the ranges are skipped by partition values and offset statistics."""
    table = _table(path, version, storage)
    if controls and CONTROL_COLUMN in table.schema().to_arrow().names:
        columns = [*columns, CONTROL_COLUMN]
    return _scan(path, table, _ranges_sql(spans, columns))


def _ranges_sql(spans: list[tuple[int, int, int]], columns: list[str], more: list[str] = ()) -> str:
    """The query of ``offset_ranges``: ``columns`` of the records in each (partition, start, end),
    and where each predicate of ``more`` holds."""
    names = ", ".join(f'"{c}"' for c in columns)
    where = " OR ".join(f'("partition" = {int(p)} AND "offset" >= {int(s)} AND "offset" < {int(e)})' for p, s, e in spans)
    also = "".join(f" AND ({m})" for m in more)
    return f'SELECT {names} FROM t WHERE ({where}){also} ORDER BY "partition", "offset"'


def first_sequences(path: str, version: int, points: Mapping[int, int], storage: Storage = None) -> list[dict]:
    """Each producer's first sequence (``{"producer_id", "first"}``) among the records at and
    above ``points`` (partition -> offset) of the log at ``path`` as of ``version``."""
    where = " OR ".join(f'("partition" = {int(p)} AND "offset" >= {int(o)})' for p, o in sorted(points.items()))
    return _query(path, version, f'SELECT producer_id, min("sequence") AS first FROM t WHERE ({where}) '
                                 "AND producer_id IS NOT NULL GROUP BY producer_id", storage).to_pylist()


def first_offset_at(path: str, version: int, partition: int, start: int, timestamp_ms: int,
                    storage: Storage = None) -> int | None:
    """The first offset at or after ``start`` of ``partition`` whose record's timestamp is at or
    after ``timestamp_ms`` (epoch milliseconds), as of the log's ``version``; None if there is none."""
    out = _query(path, version, f'SELECT min("offset") AS o FROM t WHERE "partition" = {int(partition)} '
                                f'AND "offset" >= {int(start)} '
                                f"AND timestamp >= to_timestamp_millis({int(timestamp_ms)})", storage)
    value = out.column("o")[0].as_py() if out.num_rows else None
    return None if value is None else int(value)


def record_of(path: str, producer_id: str, sequence: int, storage: Storage = None) -> tuple[int, int] | None:
    """(partition, offset) of producer ``producer_id``'s record numbered ``sequence`` in the log at
    ``path`` (files skipped by their ``sequence`` statistics); None if the log holds none."""
    quoted = producer_id.replace("'", "''")
    out = _query(path, None, f'SELECT "partition", "offset" FROM t WHERE producer_id = \'{quoted}\' '
                             f'AND "sequence" = {int(sequence)} ORDER BY "offset" LIMIT 1', storage)
    if not out.num_rows:
        return None
    return int(out.column("partition")[0].as_py()), int(out.column("offset")[0].as_py())


class RangeFiles(NamedTuple):
    """The data files of a log that hold some offset ranges, for Spark's Parquet reader: their
    paths, the folder partition values are read from (``base``), and the table's schema as
    Spark's JSON; each file's size and modification time (ms), as the log records them."""

    base: str
    paths: list[str]
    schema: dict
    sizes: tuple[int, ...] = ()
    times: tuple[int, ...] = ()


_NEEDS_DELTA = ("delta.enableDeletionVectors", "delta.columnMapping.mode")


def range_files(path: str, version: int, spans: list[tuple[int, int, int]], storage: Storage = None) -> RangeFiles | None:
    """The files of the log at ``path`` (as of ``version``) that may hold records of ``spans``
    (partition, start, end): by partition value (or, in a file of several partitions, the
    partition statistics) and offset statistics. None when plain Parquet reads would not give
    the table's rows (deletion vectors, column mapping): read those with a Delta reader."""
    table = _table(path, version, storage)
    conf = dict(table.metadata().configuration)
    if conf.get(_NEEDS_DELTA[0], "false").lower() == "true" or conf.get(_NEEDS_DELTA[1], "none").lower() != "none":
        return None
    with _remote_errors(path):
        adds = arrow_table(table.get_add_actions(flatten=True))
    names = set(adds.column_names)
    rows = adds.to_pydict()
    paths, sizes, times = [], [], []
    for i, rel in enumerate(rows["path"]):
        lo_off, hi_off = rows["min.offset"][i], rows["max.offset"][i]
        if "partition.partition" in names:
            lo_p = hi_p = rows["partition.partition"][i]
        else:
            lo_p, hi_p = rows.get("min.partition", [None] * len(rows["path"]))[i], rows.get("max.partition", [None] * len(rows["path"]))[i]
        for p, s, e in spans:
            if (lo_p is None or lo_p <= p <= hi_p) and (lo_off is None or (lo_off < e and hi_off >= s)):
                paths.append(f"{path.rstrip('/')}/{unquote(rel)}")
                sizes.append(int(rows["size_bytes"][i]))
                times.append(int(rows["modification_time"][i]))
                break
    return RangeFiles(base=path, paths=paths, schema=json.loads(table.schema().to_json()),
                      sizes=tuple(sizes), times=tuple(times))
