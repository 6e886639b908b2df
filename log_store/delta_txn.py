"""A Delta transaction driven from Python, for appends that must read before they write.

Delta's DataFrame writer makes blind appends, which never conflict. lakelog's appends must fail
when the partition's metadata or log end moved under them, so they open a transaction on the
table's DeltaLog, read the metadata and the application transaction ids (``SetTransaction``)
*inside* it, write files and commit them together with new ``SetTransaction`` versions. Delta
then rejects the commit if a concurrent commit changed the metadata or the same application ids.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping

from py4j.protocol import Py4JJavaError
from pyspark.sql import DataFrame, SparkSession

from log_store.errors import ConcurrentAppendError, LakelogError

_DELTA_PKG = "org.apache.spark.sql.delta"

# Delta's optimistic-concurrency failures: all mean "someone committed first; read again".
_CONFLICTS = (
    "ConcurrentTransactionException",
    "MetadataChangedException",
    "ConcurrentAppendException",
    "ConcurrentWriteException",
    "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException",
    "ProtocolChangedException",
)


def conflict_name(exc: BaseException) -> str | None:
    """The name of the Delta conflict behind ``exc``, or None if it is not a conflict."""
    text = f"{type(exc).__name__} {exc.java_exception if isinstance(exc, Py4JJavaError) else exc}"
    for name in _CONFLICTS:
        if name in text:
            return name
    return None


@dataclass
class DeltaTransaction:
    """One open optimistic transaction on a Delta table (see module docstring)."""

    spark: SparkSession
    jtxn: Any

    @classmethod
    def start(cls, spark: SparkSession, path: str) -> "DeltaTransaction":
        jvm = spark._jvm
        log = getattr(jvm, _DELTA_PKG).DeltaLog.forTable(spark._jsparkSession, path)
        return cls(spark, log.startTransaction())

    @property
    def read_version(self) -> int:
        return int(self.jtxn.readVersion())

    def configuration(self) -> dict[str, str]:
        """The table properties as of this transaction's snapshot."""
        conf = self.jtxn.metadata().configuration()
        jmap = self.spark._jvm.scala.collection.JavaConverters.mapAsJavaMap(conf)
        return {str(k): str(v) for k, v in jmap.items()}

    def app_version(self, app_id: str) -> int:
        """Latest version committed for ``app_id`` (-1 if none); the commit will conflict if it moves."""
        return int(self.jtxn.txnVersion(app_id))

    def commit(self, data: DataFrame | None, app_versions: Mapping[str, int]) -> int:
        """Write ``data`` and set ``app_versions`` in one commit; return the table version.

        Raises ConcurrentAppendError when Delta detects a conflicting concurrent commit.
        """
        jvm = self.spark._jvm
        actions = jvm.java.util.ArrayList()
        try:
            if data is not None:
                written = self.jtxn.writeFiles(data._jdf).iterator()
                while written.hasNext():
                    actions.add(written.next())
            now = jvm.scala.Some(int(time.time() * 1000))
            set_txn = getattr(jvm, _DELTA_PKG).actions.SetTransaction
            for app_id, version in app_versions.items():
                actions.add(set_txn(app_id, int(version), now))
            seq = jvm.scala.collection.JavaConverters.asScalaBuffer(actions).toSeq()
            manual = getattr(getattr(jvm, _DELTA_PKG), "DeltaOperations$ManualUpdate$")
            return int(self.jtxn.commit(seq, getattr(manual, "MODULE$")))
        except Exception as exc:  # py4j errors and pyspark's converted Delta exceptions
            name = conflict_name(exc)
            if name:
                raise ConcurrentAppendError(
                    f"a concurrent commit changed the table first ({name}); retry from a fresh read"
                ) from None
            raise LakelogError(f"Delta commit failed: {str(exc).splitlines()[0]}") from exc


def app_versions(spark: SparkSession, path: str) -> dict[str, int]:
    """All application transaction versions of a table's latest snapshot."""
    txn = DeltaTransaction.start(spark, path)
    snap = txn.jtxn.snapshot()
    jmap = spark._jvm.scala.collection.JavaConverters.mapAsJavaMap(snap.transactions())
    return {str(k): int(v) for k, v in jmap.items()}
