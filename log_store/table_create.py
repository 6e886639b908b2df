"""Making a table lakelog writes (a topic's log, a control table): through delta-rs on a local root,
through Spark's Delta builder on an object store (whose credentials Spark's session holds). Either
way it is safe to race: a process that loses finds the table made, and the caller compares what it
finds with what it wanted.

delta-rs refuses properties outside ``delta.*`` when a table is made, so a table is made in two
commits: version 0 with the schema and Delta's properties, then lakelog's own properties. A table
at version 0 without them is half made; whoever finds it so finishes it (``finish``), and readers
treat it as not made yet (``half_made``).
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from log_store import delta_log
from log_store.delta_errors import create_racing, retry_on_conflict
from log_store.errors import ConcurrentCommitError, StorageError
from log_store.files import is_remote
from log_store.frames import arrow_schema_of
from log_store.object_store import arrow_filesystem


def create_table(spark: SparkSession | None, path: str, schema: StructType, properties: dict[str, str],
                 partition_by: str | None = None, what: str = "the table") -> None:
    """Make the table at ``path`` unless it is there (or finish one half made)."""
    if is_remote(path):
        _create_with_spark(spark, path, schema, properties, partition_by, what)
    else:
        _create_with_delta_rs(path, schema, properties, partition_by, what)


def _create_with_spark(spark: SparkSession, path: str, schema: StructType, properties: dict[str, str],
                       partition_by: str | None, what: str) -> None:
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
            if not DeltaTable.isDeltaTable(spark, path):
                raise

    create_racing(execute, path, what)  # ... or is creating it now: wait


def _create_with_delta_rs(path: str, schema: StructType, properties: dict[str, str], partition_by: str | None,
                          what: str) -> None:
    from deltalake import DeltaTable

    from log_store.rs_tables import uri

    if _version(path) < 0:
        delta_props = {k: v for k, v in properties.items() if k.startswith("delta.")}
        try:
            DeltaTable.create(uri(path), arrow_schema_of(schema), partition_by=[partition_by] if partition_by else None,
                              configuration=delta_props, mode="ignore")
        except Exception as exc:  # noqa: BLE001 - a racing process made version 0 first: fine if it is there
            if _version(path) < 0:
                raise StorageError(f"{what} at {path} could not be made: {str(exc).strip().splitlines()[0][:300]}") from exc
    finish(path, properties, what)


def finish(path: str, properties: dict[str, str], what: str = "the table") -> None:
    """Give a table made by delta-rs lakelog's own ``properties`` if it lacks them (one commit;
    a racing finisher's commit wins, and this one then finds them set)."""
    from deltalake import CommitProperties
    from deltalake.exceptions import CommitFailedError

    from log_store.rs_tables import open_table

    own = {k: v for k, v in properties.items() if not k.startswith("delta.")}

    def attempt() -> None:
        table = open_table(path)
        configuration = table.metadata().configuration
        if all(k in configuration for k in own):
            return
        try:
            table.alter.set_table_properties(own, raise_if_not_exists=False,
                                             commit_properties=CommitProperties(max_commit_retries=0))
        except CommitFailedError as exc:
            raise ConcurrentCommitError(f"{what} at {path} was being finished by another process") from exc

    if own:
        retry_on_conflict(attempt, attempts=20)


def table_exists(spark: SparkSession | None, path: str) -> bool:
    """Whether a table is at ``path`` (on a local root: a commit listed, no JVM)."""
    if is_remote(path):
        from delta.tables import DeltaTable

        return DeltaTable.isDeltaTable(spark, path)
    return _version(path) >= 0


def half_made(path: str, prop: str) -> bool:
    """Whether the local table at ``path`` is one delta-rs made whose own properties are not set
    yet: at version 0, without ``prop``, and made by delta-rs (an earlier lakelog made its tables
    with Spark, in one commit)."""
    if is_remote(path) or _version(path) != 0:
        return False
    fs, local = arrow_filesystem(path)
    actions = delta_log.commit_actions(fs, f"{local}/_delta_log", 0) or []
    info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    meta = next((a["metaData"] for a in actions if "metaData" in a), {})
    return str(info.get("engineInfo", "")).startswith("delta-rs") and prop not in (meta.get("configuration") or {})


def _version(path: str) -> int:
    fs, local = arrow_filesystem(path)
    try:
        return delta_log.latest_local_version(f"{local}/_delta_log")
    except OSError as exc:
        raise StorageError(f"the table at {path} cannot be read ({exc}): is its root lost or not mounted?") from exc

