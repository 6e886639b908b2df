"""Making a table through delta-rs (``log_store.rs_engine``), with lakelog's properties, which
delta-rs's own creation refuses: apart from the transaction, which starts on a table that exists."""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import CommitProperties

from log_store import rs_tables
from log_store.delta_errors import retry_on_conflict, translate
from log_store.files import is_remote
from log_store.rs_engine import RsTransaction, Storage


def create_table(path: str, schema: pa.Schema, partition_by: str | None = None,
                 properties: Mapping[str, str] | None = None, storage: Storage = None) -> int:
    """Make the table at ``path`` if there is none, with ``properties``; return its version.
    Racing creators: one makes it, the others find it. On a local disk as lakelog makes its tables
    (``log_store.table_create``: one commit). In an object store (``storage``) through delta-rs,
    which takes only ``delta.*`` properties at creation; the others follow in a commit of their
    own, made by whichever process finds them missing (a creator killed between the two leaves them
    to the next)."""
    given = dict(properties or {})
    if storage is None and not is_remote(path):
        from pyspark.sql.pandas.types import from_arrow_schema

        from log_store.table_create import create_table as create_local

        create_local(None, path, from_arrow_schema(schema), given, partition_by)
        return RsTransaction.start(path).read_version
    delta_props = {k: v for k, v in given.items() if k.startswith("delta.")}
    try:
        DeltaTable.create(rs_tables.uri(path), schema, partition_by=[partition_by] if partition_by else None,
                          mode="ignore", configuration=delta_props or None,
                          storage_options=dict(storage) if storage else None,
                          commit_properties=CommitProperties(max_commit_retries=0))
    except CommitFailedError:
        pass  # another process made version 0 first
    except Exception as exc:
        raise translate(exc) from exc

    def finish() -> int:
        txn = RsTransaction.start(path, storage)
        missing = {k: v for k, v in given.items() if k not in txn.configuration()}
        if not missing:
            return txn.read_version
        txn.set_properties(missing)
        return txn.commit()  # a conflict: another creator set them, or changed the table; look again

    return retry_on_conflict(finish)
