"""Which engine commits to a table: delta-rs's (``log_store.rs_engine``: no JVM, Delta's public
protocol) on a local root; Delta's through Spark (``log_store.engine``) on an object store, whose
credentials Spark's session holds. Both give the same transaction: the same reads inside it, the
same fence, the same commit."""

from __future__ import annotations

from pyspark.sql import SparkSession

from log_store.engine import DeltaTransaction
from log_store.errors import StorageError
from log_store.files import is_remote
from log_store.rs_engine import RsTransaction

# Table features delta-rs 1.6.6 cannot write (control tables made by an earlier release track rows):
# such a table's commits go through Delta's engine.
DELTA_ONLY_FEATURES = frozenset({"rowTracking", "domainMetadata"})


def start(spark: SparkSession, path: str, what: str = "the table") -> DeltaTransaction | RsTransaction:
    """A transaction on the newest snapshot of the table at ``path``; ``StorageError`` (naming
    ``what``) if the store refuses the read (a lost or unmounted root)."""
    if is_remote(path):
        return DeltaTransaction.start(spark, path)
    try:
        txn = RsTransaction.start(path)
    except StorageError:
        raise
    except Exception as exc:  # noqa: BLE001 - the store refused the read
        raise StorageError(f"{what} at {path} cannot be read: {str(exc).strip().splitlines()[0][:300]}") from exc
    if txn.writer_features() & DELTA_ONLY_FEATURES:  # row tracking (tables of an earlier release)
        txn.release()
        return DeltaTransaction.start(spark, path)
    return txn
