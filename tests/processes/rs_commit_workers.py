"""A process that races others making fenced appends to one Delta table through delta-rs
(log_store.rs_engine): no JVM.

Usage: rs_commit_workers.py TABLE WRITER FENCE COMMITS GO_FILE [STORAGE_JSON]

Waits for GO_FILE so that every worker starts together, then makes COMMITS appends of one row
``(WRITER, i, offset)``, each fenced on the application id FENCE (a partition's log end: the
row's offset is the end read in the transaction, plus one) and setting the writer's own id to
``i``. A conflict is retried from a fresh read. Prints one JSON line per acknowledged commit:
``{"writer", "i", "offset", "version", "read", "retries"}`` (``read``: the version the
transaction read; a larger gap than one means it was committed past commits it did not depend on).
STORAGE_JSON: delta-rs storage options of a table on S3.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(table: str, writer: str, fence: str, commits: str, go_file: str, storage: str = "{}") -> None:
    import pyarrow as pa

    from log_store.errors import ConcurrentCommitError
    from log_store.names import producer_app_id
    from log_store.rs_engine import RsTransaction

    options = json.loads(storage) or None
    RsTransaction.start(table, options).snapshot_app_versions()  # imports and the first read before the race
    print(json.dumps({"ready": writer}), flush=True)
    while not os.path.exists(go_file):
        time.sleep(0.01)
    for i in range(int(commits)):
        retries = 0
        while True:
            txn = RsTransaction.start(table, options)
            offset = txn.app_version(fence) + 1
            txn.write_rows(pa.table({"writer": [writer], "i": [i], "offset": [offset]}))
            try:
                version = txn.commit({fence: offset, producer_app_id(writer): i})
                break
            except ConcurrentCommitError:
                retries += 1
                time.sleep(random.uniform(0, 0.002 * min(retries, 10)))
        print(json.dumps({"writer": writer, "i": i, "offset": offset, "version": version,
                          "read": txn.read_version, "retries": retries}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
