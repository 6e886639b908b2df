"""The campaign's checker on a log with transactions (hand-made roots, delta-rs, no Spark): a
marker is no record (never owed, never a duplicate or a phantom, its offset taken); a
read_committed group owes the committed records below the last stable offset and must deliver no
aborted or open one; a read_uncommitted group owes every record. Each violation is planted and
must be reported."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import CommitProperties, Transaction, write_deltalake

from chaos.checker_txn import ABORTED, COMMITTED, OPEN, output_problems, states
from tests.unit.test_checker import CDF, LOG, SINK, Root, anomalies
from tests.unit.test_checker_compaction import Compacted

TXN_LOG = LOG.append(pa.field("control", pa.string()))
RECORD, MARKER = "record", "marker"


def rows(*items: tuple) -> list[dict]:
    """items: (offset, kind, producer, sequence or marker kind, key): one partition, 0."""
    out = []
    for o, kind, pid, seq, key in items:
        marker = kind == MARKER
        out.append(dict(partition=0, offset=o, leader_epoch=0, key=None if marker else key.encode(),
                        value=None if marker else b"v", producer_id=pid, sequence=None if marker else seq,
                        control=seq if marker else None))
    return out


# t's first transaction (a, b) commits, its second (a) aborts, its third (b) is open from 5; q's
# plain record (c) follows it, past the last stable offset.
LOG_ROWS = rows((0, RECORD, "t", 0, "a"), (1, RECORD, "t", 1, "b"), (2, MARKER, "t", "commit", None),
                (3, RECORD, "t", 2, "a"), (4, MARKER, "t", "abort", None), (5, RECORD, "t", 3, "b"),
                (6, RECORD, "q", 0, "c"))


class TxnRoot(Root):
    def txn_log(self, items: list[dict], marks: dict[str, int]) -> None:
        """One append of ``items`` setting the partition-0 marks of ``marks`` (producer -> mark)."""
        props = CommitProperties(app_transactions=[Transaction(f"lakelog.txn.mark.0.{pid}", m) for pid, m in marks.items()])
        write_deltalake(str(self.path / "topics" / "t"), pa.Table.from_pylist(items, TXN_LOG), mode="append",
                        configuration=CDF, schema_mode="merge", commit_properties=props)

    def sink(self, group: str, *offsets: int) -> None:
        """One sink commit of the log's rows at ``offsets``, as lakelog's sink holds them."""
        held = {r["offset"]: r for r in LOG_ROWS}
        write_deltalake(str(self.path / "sinks" / group), pa.Table.from_pylist(
            [{"topic": "t", **{k: v for k, v in held[o].items() if k != "control"}} for o in offsets], SINK),
            mode="append", configuration=CDF, schema_mode="merge")

    def check_levels(self, groups=("ru", "rc"), committed=("rc",)):
        from chaos.checker import check

        return check(str(self.path), "t", self.inputs, {"t": range(4), "q": range(1)},
                     {g: str(self.path / "sinks" / g) for g in groups}, read_committed=committed)


@pytest.fixture()
def txn_root(tmp_path) -> TxnRoot:
    root = TxnRoot(tmp_path / "root")
    root.producer("t", ["a", "b", "a", "b"])
    root.producer("q", ["c"])
    root.topic(1, [(0, "ReadWrite", None)])
    root.txn_log(LOG_ROWS, {"t": 2 * 5 + 1})
    return root


def test_transactional_records_take_the_state_their_next_marker_gives():
    assert states(LOG_ROWS, {(0, "t"): 5}) == {(0, 0): COMMITTED, (0, 1): COMMITTED, (0, 3): ABORTED, (0, 5): OPEN}


def test_each_level_owes_what_its_reader_delivers_and_markers_are_no_records(txn_root):
    txn_root.sink("ru", 0, 1, 3, 5, 6)
    txn_root.sink("rc", 0, 1)
    found = txn_root.check_levels()
    assert anomalies(found) == {}, found.summary()
    assert found.stats["log_markers"] == 2 and found.stats["log_records"] == 5
    assert found.stats["delivered[rc]"] == 2 and found.stats["delivered[ru]"] == 5


def test_the_level_decides_what_is_owed(txn_root):
    txn_root.sink("ru", 0, 1)  # read_uncommitted owes the aborted, open and unstable records too
    txn_root.sink("rc", 0)  # a committed transaction's record missing
    found = txn_root.check_levels()
    assert anomalies(found) == {"undelivered": 4}, found.summary()
    assert sorted(found.samples["undelivered"])[:1] == ["rc: p0@1 (t#1) never delivered"]


def test_an_aborted_an_open_record_or_a_marker_delivered_is_an_anomaly(txn_root):
    txn_root.sink("rc", 0, 1, 3, 5, 6)  # aborted 3, open 5, plain 6 past the last stable offset
    txn_root.sink("ru", 0, 1, 2, 3, 5, 6)  # the commit marker
    found = txn_root.check_levels()
    assert anomalies(found) == {"aborted_delivered": 1, "open_delivered": 2, "marker_delivered": 1}, found.summary()
    assert found.samples["aborted_delivered"] == ["rc: p0@3 (t#2) delivered in version 0"]


def test_a_read_committed_group_judged_as_read_uncommitted_owes_the_rest(txn_root):
    txn_root.sink("rc", 0, 1)
    found = txn_root.check_levels(groups=("rc",), committed=())
    assert anomalies(found) == {"undelivered": 3}, found.summary()


def test_a_transactions_output_is_judged_by_what_transactions_promise():
    """Each input once in the committed view, whole, none aborted, nothing open; and a
    read_committed reader delivered exactly that view."""
    def out(*items):
        return [dict(partition=0, offset=o, producer_id="x", sequence=None if v in ("commit", "abort") else o,
                     key=None, value=None if v in ("commit", "abort") else v.encode(),
                     control=v if v in ("commit", "abort") else None) for o, v in items]

    good = out((0, "a-0"), (1, "b-0"), (2, "commit"), (3, "a-0"), (4, "abort"), (5, "c-0"), (6, "commit"))
    assert output_problems(good, {}, ["a", "b", "c"], "-0", delivered=[(0, 0), (0, 1), (0, 5)]) == []
    assert output_problems(good, {}, ["a", "b", "c"], "-0", delivered=[(0, 0), (0, 1), (0, 3), (0, 5)]) == [
        "a read_committed reader delivered 4 records, the committed view has 3; differing at [(0, 3)]"]
    twice = out((0, "a-0"), (1, "b-0"), (2, "commit"), (3, "a-0"), (4, "commit"), (5, "c-0"), (6, "commit"))
    assert output_problems(twice, {}, ["a", "b", "c"], "-0") == ["1 input records committed more than once, first ['a']"]
    partial = out((0, "a-0"), (1, "abort"), (2, "b-0"), (3, "commit"), (4, "c-0"))
    assert output_problems(partial, {(0, "x"): 4}, ["a", "b", "c"], "-0") == [
        "2 input records not committed, first ['a', 'c']", "transactions left open: [((0, 'x'), 4)]"]


def test_key_compaction_may_remove_aborted_records_but_they_supersede_nothing(tmp_path):
    root = Compacted(tmp_path / "root")
    root.topic(1, [(0, "ReadWrite", None)])
    write_deltalake(str(root.path / "topics" / "t"), pa.Table.from_pylist(
        rows((0, RECORD, "t", 0, "a"), (1, MARKER, "t", "commit", None), (2, RECORD, "t", 1, "a"),
             (3, MARKER, "t", "abort", None), (4, RECORD, "t", 2, "b"), (5, MARKER, "t", "commit", None)), TXN_LOG),
        mode="append", configuration=CDF, schema_mode="merge")
    root.clean((0, 2))  # the aborted a
    from chaos.checker import check

    found = check(str(root.path), "t", {}, {}, {})
    assert anomalies(found) == {}, found.summary()
    assert found.stats["aborted_records_removed"] == 1
    root.clean((0, 0))  # the committed a, which only an aborted record followed
    found = check(str(root.path), "t", {}, {}, {})
    assert anomalies(found) == {"compaction_lost": 1}, found.summary()


def test_a_marker_removed_while_its_transactions_records_stay_is_lost(tmp_path):
    root = Compacted(tmp_path / "root")
    root.topic(1, [(0, "ReadWrite", None)])
    write_deltalake(str(root.path / "topics" / "t"), pa.Table.from_pylist(
        rows((0, RECORD, "t", 0, "a"), (1, MARKER, "t", "abort", None), (2, RECORD, "t", 1, "b"),
             (3, MARKER, "t", "commit", None)), TXN_LOG), mode="append", configuration=CDF, schema_mode="merge")
    root.clean((0, 3))  # b's commit marker, b kept: a reader would take b for an open transaction's
    from chaos.checker import check

    found = check(str(root.path), "t", {}, {}, {})
    assert anomalies(found) == {"compaction_lost": 1}, found.summary()
    assert "commit marker of t" in found.samples["compaction_lost"][0]
