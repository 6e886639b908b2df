"""Which engine commits to a table: delta-rs's (``log_store.rs_engine``: Delta's public protocol,
no JVM) on a local root and on S3, where the endpoint and credentials come from the session's S3A
settings and the store must first show it honours conditional writes (``put_if_absent``); Delta's
through Spark (``log_store.engine``) on other object stores (GCS, ADLS) and for a table whose rules
a file written by pyarrow would not keep (``rs_writable``). Both give the same transaction: the
same reads inside it, the same fence, the same commit."""

from __future__ import annotations

from pyspark.sql import SparkSession

from log_store import put_if_absent
from log_store.engine import DeltaTransaction
from log_store.errors import StorageError
from log_store.files import is_remote
from log_store.object_store import engine_s3, s3_storage
from log_store.rs_engine import RsTransaction

# The writer features of the tables lakelog makes, which a commit of files written by pyarrow keeps
# as Delta's writer would. A table with any other (control tables of an earlier release track rows;
# a user's sink may have check constraints, generated or identity columns, column mapping,
# deletion vectors: rules Delta's writer enforces on the rows it writes) goes through Delta's engine.
RS_WRITER_FEATURES = frozenset({"appendOnly", "invariants", "changeDataFeed", "timestampNtz", "variantType"})
# The same rules in a table of a legacy protocol (writer version 3 to 6, no feature list).
PROPERTY_RULES = ("delta.constraints.", "delta.columnMapping.mode")
SCHEMA_RULES = ("delta.generationExpression", "delta.identity.", "delta.invariants")


def start(spark: SparkSession, path: str, what: str = "the table") -> DeltaTransaction | RsTransaction:
    """A transaction on the newest snapshot of the table at ``path``; ``StorageError`` (naming
    ``what``) if the store refuses the read (a lost or unmounted root)."""
    storage = None
    if is_remote(path):
        if not engine_s3(path):  # GCS, ADLS, Databricks: Delta's engine (docs/engine.md)
            return DeltaTransaction.start(spark, path)
        storage = s3_storage(spark, path)
        put_if_absent.check(path, storage)
    try:
        txn = RsTransaction.start(path, storage)
    except StorageError:
        raise
    except Exception as exc:  # noqa: BLE001 - the store refused the read
        raise StorageError(f"{what} at {path} cannot be read: {str(exc).strip().splitlines()[0][:300]}") from exc
    if not rs_writable(txn):
        txn.release()
        return DeltaTransaction.start(spark, path)
    return txn


def rs_writable(txn: RsTransaction) -> bool:
    """Whether files written by pyarrow keep every rule of the table (``RS_WRITER_FEATURES``)."""
    if txn.writer_features() - RS_WRITER_FEATURES:
        return False
    rules = [k for k, v in txn.configuration().items() if k.startswith(PROPERTY_RULES) and v != "none"]
    return not rules and not any(rule in txn.schema_json() for rule in SCHEMA_RULES)
