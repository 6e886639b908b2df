"""Making a table lakelog writes (a topic's log, a control table): on a local root and on S3 by
writing its first commit as Delta's protocol describes it, on other object stores through Spark's
Delta builder (whose credentials Spark's session holds). Either way it is safe to race: a process that loses
finds the table made, and the caller compares what it finds with what it wanted.

Why lakelog writes version 0 itself on a local root rather than through delta-rs's
``DeltaTable.create``: delta-rs 1.6.6 refuses properties outside ``delta.*`` at creation (lakelog
keeps a topic's partition metadata in ``lakelog.*`` properties, so a table made by delta-rs would
need a second commit, and be half made in between), and it lists no ``invariants`` writer feature
for a table-features protocol whose schema has NOT NULL columns, which Spark's Delta then refuses
to read at that version ("enabled in metadata but not listed in protocol"). The commit is one
JSON file linked into ``_delta_log`` under version 0's name (a hard link fails if the name
exists: put-if-absent, as delta-rs commits on a local disk); on S3 one ``PUT`` with
``If-None-Match: *`` (``put_if_absent``), as delta-rs commits there.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

from pyspark.sql.types import DataType, StructType, TimestampNTZType

from log_store import delta_log, put_if_absent
from log_store.commit_files import create_local
from log_store.delta_errors import create_racing
from log_store.delta_sql import is_delta_table
from log_store.errors import StorageError
from log_store.files import is_remote, local_path
from log_store.object_store import engine_s3, s3_storage

# What a table with a TIMESTAMP_NTZ column needs (reader 3, writer 7 with table features), and the
# features of writer version 4 a table-features protocol must list once in use (NOT NULL columns:
# invariants; the change feed), as Spark's Delta makes such a table.
NTZ_PROTOCOL = {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["timestampNtz"],
                "writerFeatures": ["appendOnly", "invariants", "changeDataFeed", "timestampNtz"]}
PLAIN_PROTOCOL = {"minReaderVersion": 1, "minWriterVersion": 4}


def create_table(spark, path: str, schema: StructType, properties: dict[str, str], partition_by: str | None = None,
                 what: str = "the table") -> None:
    """Make the table at ``path`` unless it is there."""
    if engine_s3(path):
        _create_on_s3(spark, path, schema, properties, partition_by)
    elif is_remote(path):
        _create_with_spark(spark, path, schema, properties, partition_by, what)
    else:
        _create_local(path, schema, properties, partition_by, what)


def table_exists(spark, path: str) -> bool:
    """Whether a table is at ``path`` (on a local root or S3: a commit listed, no JVM)."""
    if engine_s3(path):
        return put_if_absent.listed(f"{path.rstrip('/')}/_delta_log/", s3_storage(spark, path))
    if is_remote(path):
        return is_delta_table(spark, path)
    return _version(path) >= 0


def _create_with_spark(spark, path: str, schema: StructType, properties: dict[str, str], partition_by: str | None,
                       what: str) -> None:
    from delta.tables import DeltaTable

    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(schema)
    if partition_by:
        builder = builder.partitionedBy(partition_by)
    for key, value in properties.items():
        builder = builder.property(key, value)

    def execute() -> None:
        try:
            builder.execute()
        except Exception:  # a racing process created it first: fine if the table is there
            if not is_delta_table(spark, path):
                raise

    create_racing(execute, path, what)  # ... or is creating it now: wait


def first_commit(schema: StructType, properties: dict[str, str], partition_by: str | None, now_ms: int) -> list[dict]:
    """Version 0 of a new table: commit info, protocol and metadata (Delta's protocol)."""
    protocol = NTZ_PROTOCOL if _has(schema, TimestampNTZType) else PLAIN_PROTOCOL
    partitions = [partition_by] if partition_by else []
    meta = {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}}, "schemaString": schema.json(),
            "partitionColumns": partitions, "configuration": dict(properties), "createdTime": now_ms}
    info = {"timestamp": now_ms, "operation": "CREATE TABLE",
            "operationParameters": {"partitionBy": json.dumps(partitions), "properties": json.dumps(properties)},
            "isBlindAppend": True, "engineInfo": "lakelog"}
    return [{"commitInfo": info}, {"protocol": protocol}, {"metaData": meta}]


def _create_on_s3(spark, path: str, schema: StructType, properties: dict[str, str], partition_by: str | None) -> None:
    """Version 0 created put-if-absent (``If-None-Match``) in a store that honours it."""
    storage = s3_storage(spark, path)
    put_if_absent.check(path, storage)
    if table_exists(spark, path):
        return
    body = "".join(json.dumps(action) + "\n" for action in first_commit(schema, properties, partition_by,
                                                                         int(time.time() * 1000)))
    put_if_absent.create(f"{path.rstrip('/')}/_delta_log/{0:020d}.json", body.encode(), storage)


def _create_local(path: str, schema: StructType, properties: dict[str, str], partition_by: str | None, what: str) -> None:
    if _version(path) >= 0:
        return
    log_dir = Path(local_path(path)) / "_delta_log"
    body = "".join(json.dumps(action) + "\n" for action in first_commit(schema, properties, partition_by,
                                                                         int(time.time() * 1000)))
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
        # False: a racing creator's version 0, which the caller compares with what it wanted
        create_local(log_dir / f"{0:020d}.json", body.encode())
    except OSError as exc:
        raise StorageError(f"{what} at {path} could not be made ({exc}): is its root lost or read-only?") from exc


def _has(kind: DataType, wanted: type) -> bool:
    """Whether ``kind`` is, or holds anywhere inside it, a ``wanted`` type."""
    if isinstance(kind, wanted):
        return True
    if isinstance(kind, StructType):
        return any(_has(f.dataType, wanted) for f in kind.fields)
    inner = [getattr(kind, a) for a in ("elementType", "keyType", "valueType") if hasattr(kind, a)]
    return any(_has(k, wanted) for k in inner)


def _version(path: str) -> int:
    try:
        return delta_log.latest_local_version(str(Path(local_path(path)) / "_delta_log"))
    except OSError as exc:
        raise StorageError(f"the table at {path} cannot be read ({exc}): is its root lost or not mounted?") from exc
