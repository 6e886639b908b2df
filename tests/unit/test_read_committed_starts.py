"""Where a read_committed ``format("lakelog")`` read may start (``pipelines.spark.positions``), and
the refusal of read_committed where lakelog cannot read the open transactions. Pure: no Spark."""

from __future__ import annotations

import pytest

from log_store import rs_reader
from log_store.errors import InvalidConfigurationError
from pipelines.spark.positions import check_start_in_open_transaction, in_open_transaction


def test_a_start_past_the_last_stable_offset_within_the_log_is_in_an_open_transaction():
    assert [s for s in range(12) if in_open_transaction(s, 8, 10)] == [9, 10]


def test_a_batch_start_in_an_open_transaction_is_refused_unless_its_end_is_the_start():
    check_start_in_open_transaction("t", 0, 9, 9, 8, 10)
    with pytest.raises(InvalidConfigurationError, match=r"topic 't' partition 0: startingOffsets 9 is past the last "
                                                        r"stable offset 8 .* offsets 8-9 hold a transaction .* start at "
                                                        r"or below 8, read with read_uncommitted"):
        check_start_in_open_transaction("t", 0, 9, 8, 8, 10)


@pytest.mark.parametrize("path", ["gs://bucket/root/logs/t", "abfss://c@account.dfs.core.windows.net/root/logs/t"])
def test_read_committed_on_gcs_and_azure_is_refused_naming_the_level_to_read_with(path):
    with pytest.raises(InvalidConfigurationError, match=f"{path}: a read_committed read finds open transactions in the "
                                                        "log's commit files, which lakelog reads on local and S3 roots "
                                                        "only; read this log with isolation level read_uncommitted"):
        rs_reader._txn_marks(path, None, None)
