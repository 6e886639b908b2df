"""A control table made on demand by processes starting at once (two servers registering in a new
root): the one that loses finds the location not empty and not yet a Delta table while the other
is still making it. It waits for the table rather than fail (the fault campaign's seed 1518: a
server that never started)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from delta.tables import DeltaTable

from control_plane.layout import RootLayout
from control_plane.tables import TABLES, ControlTables
from log_store.frames import struct_of


def test_a_control_table_another_process_is_still_making_is_waited_for(spark, root):
    tables = ControlTables(spark, RootLayout(root))
    path = tables.path("servers")
    (Path(path) / "_delta_log").mkdir(parents=True)  # the other creator's, before its first commit lands

    made_aside = str(Path(root) / "made-aside")
    DeltaTable.createIfNotExists(spark).location(made_aside).addColumns(struct_of(spark, TABLES["servers"])).execute()

    def other_creator_finishes() -> None:
        time.sleep(8)  # past this process's first attempt
        first = "00000000000000000000.json"  # its first commit lands whole, as a creator's does
        os.rename(Path(made_aside) / "_delta_log" / first, Path(path) / "_delta_log" / first)

    other = threading.Thread(target=other_creator_finishes)
    other.start()
    try:
        tables.ensure_table("servers")  # before: DELTA_CREATE_TABLE_WITH_NON_EMPTY_LOCATION at once
    finally:
        other.join(60)
    assert DeltaTable.isDeltaTable(spark, path)
    assert spark.read.format("delta").load(path).count() == 0
