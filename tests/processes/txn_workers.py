"""The read-process-write actor (``chaos.actors.txn_copy``) without a JVM, for the transaction
tests to kill: the group reads topic ``in`` (read_committed) and writes each record to ``out1``
and ``out2`` with its positions, one transaction per batch, until caught up. Run with
``LAKELOG_NO_JVM=1``: delta-rs only.

Usage: txn_workers.py ROOT TRANSACTIONAL_ID GROUP BATCH
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from chaos.actors import txn_copy  # noqa: E402
from log_store.session import LazySession  # noqa: E402

if __name__ == "__main__":
    root, transactional_id, group, batch = sys.argv[1:]
    txn_copy(LazySession(lambda: sys.exit("a JVM was started")),
             {"root": root, "topic": "in", "outputs": ["out1", "out2"], "group": group,
              "transactional_id": transactional_id, "batch": int(batch)})
