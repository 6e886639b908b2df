"""The checker's rules for a compacted topic, on hand-made roots (delta-rs, no Spark): a key
compaction is an OPTIMIZE commit with ``dataChange=false`` rewriting the log's files to the records
it keeps, as lakelog commits it; the change feed keeps every record as appended."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from chaos.checker import Findings
from chaos.checker_compaction import check_compaction, compaction_removals, era
from chaos.checker_reads import as_sent, read_current, read_log_changes, resizes
from chaos.tables import drain_gap
from tests.unit.test_checker import LOG, TOPICS, Root, anomalies

CONFIGS = pa.schema([("topic", pa.string()), ("location", pa.string()), ("config", pa.map_(pa.string(), pa.string())),
                     ("config_version", pa.int32())])
COUNTED = TOPICS.append(pa.field("undeleted_partition_count", pa.int32()))


class Compacted(Root):
    """A root whose topic ``t`` has ``cleanup.policy=compact``; records may be tombstones."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._write("control/topic_configs", CONFIGS, [dict(topic="t", location=str(path / "topics" / "t"),
                                                             config=[("cleanup.policy", "compact")], config_version=1)])

    def put(self, *records: tuple, pid: str = "p", epoch: int = 0) -> None:
        """One append of records (partition, offset, key, sequence, value or None: a tombstone)
        under leader ``epoch``."""
        self._write("topics/t", LOG, [dict(partition=p, offset=o, leader_epoch=epoch, key=k.encode(),
                                           value=None if v is None else v.encode(), producer_id=pid, sequence=s)
                                      for p, o, k, s, v in records])

    def resize(self, version: int, epochs: dict[int, int]) -> None:
        """A topic record of ``len(epochs)`` undeleted partitions at these leader epochs: a resize
        when the count differs from the record before's."""
        self._write("control/topics", COUNTED, [dict(topic="t", topic_version=version, undeleted_partition_count=len(epochs),
                                                     partitions=[dict(partition=p, leader_epoch=e, mode="ReadWrite",
                                                                      start_offset=0, end_offset=None)
                                                                 for p, e in epochs.items()])])

    def clean(self, *gone: tuple[int, int], rekey: dict | None = None) -> None:
        """A key compaction removing the records at (partition, offset) ``gone``: every file of the
        log replaced by one file of the rest, one OPTIMIZE commit with ``dataChange=false``.
        ``rekey``: (partition, offset) -> a key the rewrite gives that record (a bad rewrite)."""
        path = self.path / "topics" / "t"
        table = DeltaTable(str(path))
        rows = [r for r in table.to_pyarrow_table().to_pylist() if (r["partition"], r["offset"]) not in set(gone)]
        for r in rows:
            r["key"] = (rekey or {}).get((r["partition"], r["offset"]), r["key"])
        name = f"part-{uuid.uuid4()}.parquet"
        pq.write_table(pa.Table.from_pylist(rows, LOG), path / name)
        now = int(time.time() * 1000)
        # as lakelog's engine commits it (Spark's Delta writer names the operation OPTIMIZE)
        actions = [{"commitInfo": {"timestamp": now, "operation": "WRITE", "lakelog.operation": "OPTIMIZE",
                                   "operationParameters": {}}}]
        actions += [{"remove": {"path": f, "deletionTimestamp": now, "dataChange": False}} for f in files_of(path)]
        actions.append({"add": {"path": name, "size": (path / name).stat().st_size, "partitionValues": {},
                                "modificationTime": now, "dataChange": False}})
        version = table.version() + 1
        (path / "_delta_log" / f"{version:020d}.json").write_text("".join(json.dumps(a) + "\n" for a in actions))

    def deliver_values(self, group: str, *records: tuple, pid: str = "p") -> None:
        """A sink commit of records (partition, offset, key, sequence, value or None)."""
        self.deliver(group, *[(p, o, 0, k, s) for p, o, k, s, _ in records], pid=pid)


def files_of(table: Path) -> list[str]:
    return pa.table(DeltaTable(str(table)).get_add_actions(flatten=True)).column("path").to_pylist()


def compacted_root(tmp_path) -> Compacted:
    """Key a in partition 0, then after a grow (two partitions to three: every epoch bumped) in
    partition 1; key b in partition 1 ending in a tombstone; group g delivered none of it yet."""
    root = Compacted(tmp_path / "root")
    root.producer("p", ["a", "b", "a", "b", "a", "b"])
    root.resize(1, {0: 0, 1: 0})
    root.put((0, 0, "a", 0, "p:0"), (1, 0, "b", 1, "p:1"))
    root.put((0, 1, "a", 2, "p:2"), (1, 1, "b", 3, "p:3"))
    root.resize(2, {0: 1, 1: 1, 2: 0})
    root.put((1, 2, "a", 4, "p:4"), (1, 3, "b", 5, None), epoch=1)  # a moved to partition 1; b's tombstone
    root.generation("g", 1, {"m1": [0, 1]})
    root.commit("g", "m1", 1, "acquire", {0: 0, 1: 0})
    return root


def deliver_all_left(root: Compacted, *kept: tuple) -> None:
    root.deliver_values("g", *kept)
    root.commit("g", "m1", 1, "commit", {0: 2, 1: 4})


def test_records_superseded_in_their_partition_or_across_a_resize_were_compacted_not_lost(tmp_path):
    root = compacted_root(tmp_path)
    root.clean((1, 0), (1, 1), (0, 0), (0, 1))  # b's older records; a's superseded in partition 1
    deliver_all_left(root, (1, 2, "a", 4, "p:4"), (1, 3, "b", 5, None))
    found = root.check()
    assert anomalies(found) == {}, found.summary()
    assert found.stats["records_compacted"] == 4 and found.stats["compacted_before_read[g]"] == 4


def test_a_latest_tombstone_removed_with_its_keys_older_records_is_no_loss(tmp_path):
    root = compacted_root(tmp_path)
    root.clean((1, 0), (1, 1))
    root.clean((1, 3))  # later, past delete.retention.ms
    deliver_all_left(root, (0, 0, "a", 0, "p:0"), (0, 1, "a", 2, "p:2"), (1, 2, "a", 4, "p:4"))
    found = root.check()
    assert anomalies(found) == {}, found.summary()
    assert found.stats["tombstones_removed"] == 1


def test_a_keys_latest_record_removed_is_lost(tmp_path):
    root = compacted_root(tmp_path)
    root.clean((1, 2), (0, 0))  # a's latest (partition 1), and a's oldest (superseded: fine)
    deliver_all_left(root, (0, 1, "a", 2, "p:2"), (1, 0, "b", 1, "p:1"), (1, 1, "b", 3, "p:3"), (1, 3, "b", 5, None))
    found = root.check()
    assert anomalies(found) == {"compaction_lost": 1}, found.summary()


def test_a_record_removed_before_its_superseding_record_was_appended_is_lost(tmp_path):
    root = Compacted(tmp_path / "root")
    root.producer("p", ["a", "a"])
    root.topic(1, [(0, "ReadWrite", None)])
    root.put((0, 0, "a", 0, "p:0"))
    root.clean((0, 0))  # a's only record, then its latest
    root.put((0, 1, "a", 1, "p:1"))
    found = root.check(groups=())
    assert anomalies(found) == {"compaction_lost": 1}, found.summary()


def test_an_older_record_kept_after_its_keys_tombstone_was_removed_is_resurrected(tmp_path):
    root = compacted_root(tmp_path)
    root.producer("q", ["c", "c"])
    root.put((0, 2, "c", 0, "q:0"), pid="q", epoch=1)
    root.resize(3, {0: 2, 1: 2, 2: 1, 3: 0})  # a grow: c's tombstone after it is later than 0@2
    root.put((1, 4, "c", 1, None), pid="q", epoch=2)  # in another partition than c's older record
    root.clean((1, 4))  # the tombstone removed, c's value at 0@2 left: c is back
    found = root.check(groups=())
    assert anomalies(found) == {"compaction_resurrected": 1}, found.summary()


def test_a_removed_tombstone_a_later_record_follows_resurrects_nothing(tmp_path):
    """c's tombstone is followed in its own partition, d's by a record of a later era elsewhere:
    both keys have a value, and their older records left in partition 0 are no resurrection."""
    root = Compacted(tmp_path / "root")
    root.producer("p", ["c", "d", "c", "c", "d", "d"])
    root.resize(1, {0: 0, 1: 0})
    root.put((0, 0, "c", 0, "p:0"), (0, 1, "d", 1, "p:1"))
    root.resize(2, {0: 1, 1: 1, 2: 0})
    root.put((1, 0, "c", 2, None), (1, 1, "c", 3, "p:3"), (1, 2, "d", 4, None), epoch=1)
    root.resize(3, {0: 2, 1: 2, 2: 1, 3: 0})
    root.put((3, 0, "d", 5, "p:5"))  # a new partition: after the resize
    root.clean((1, 0), (1, 2))
    found = root.check(groups=())
    assert anomalies(found) == {}, found.summary()
    assert found.stats["tombstones_removed"] == 2


def test_a_record_removed_for_a_record_of_its_era_in_another_partition_is_lost(tmp_path):
    """One era: kp wrote key c to partition 0 by hand, p then to partition 1 (its partitioner's).
    Neither follows the other (Kafka cleans each partition alone): removing 0@0 lost c's value
    there. After a resize between them, partition 1's record supersedes it."""
    root = Compacted(tmp_path / "root")
    root.producer("kp", ["c"])
    root.producer("p", ["c"])
    root.resize(1, {0: 0, 1: 0})
    root.put((0, 0, "c", 0, "kp:0"), pid="kp")
    root.put((1, 0, "c", 0, "p:0"), pid="p")
    root.clean((0, 0))
    found = root.check(groups=())
    assert anomalies(found) == {"compaction_lost": 1}, found.summary()
    moved = Compacted(tmp_path / "moved")
    moved.producer("kp", ["c"])
    moved.producer("p", ["c"])
    moved.resize(1, {0: 0, 1: 0})
    moved.put((0, 0, "c", 0, "kp:0"), pid="kp")
    moved.resize(2, {0: 1, 1: 1, 2: 0})
    moved.put((1, 0, "c", 0, "p:0"), pid="p", epoch=1)
    moved.clean((0, 0))
    found = moved.check(groups=())
    assert anomalies(found) == {}, found.summary()
    assert found.stats["records_compacted"] == 1


def test_the_checkers_eras_are_key_compactions_on_a_grow_a_shrink_a_reused_number_and_an_election():
    """The checker derives eras on its own (no lakelog import): the same as
    ``log_store.key_order.eras`` on the barriers of histories the controller plans."""
    from control_plane.controller.rules import plan_elect, plan_expand, plan_retire
    from control_plane.image import TopicImage
    from log_store.key_order import eras
    from tests.unit.test_key_order import NOW, history

    rs = history(2, 4, 3)
    rs.append(plan_retire(rs[-1], {3: 5}, NOW))
    rs.append(plan_elect(rs[-1], "/y", NOW))
    rs.append(plan_expand(rs[-1], 4, NOW))  # number 3 again, its epochs continuing
    records = [dict(partition=p, leader_epoch=e) for p in range(4) for e in range(5)
               if p < 3 or e >= 1]  # partition 3: its new incarnation only (key_order prunes the old one)
    ours = [era(r, resizes([x.row() for x in rs])) for r in records]
    theirs = eras(pa.array([r["partition"] for r in records], pa.int32()),
                  pa.array([r["leader_epoch"] for r in records], pa.int32()), TopicImage("t", rs).barriers())
    assert ours == theirs.to_pylist()
    assert max(ours) == 3 and min(ours) == 0


def test_a_record_the_log_holds_now_that_was_not_appended_there_is_a_phantom(tmp_path):
    root = compacted_root(tmp_path)
    root.clean((0, 0), rekey={(1, 1): b"z"})
    found = root.check(groups=())
    assert anomalies(found) == {"compaction_phantom": 1}, found.summary()


def test_a_consumer_going_back_in_a_keys_order_is_a_reorder_though_it_skipped_compacted_records(tmp_path):
    root = compacted_root(tmp_path)
    root.clean((0, 1))
    root.deliver_values("g", (1, 2, "a", 4, "p:4"))
    root.deliver_values("g", (0, 0, "a", 0, "p:0"))  # back to a's first record after its latest
    root.deliver_values("g", (1, 0, "b", 1, "p:1"), (1, 1, "b", 3, "p:3"), (1, 3, "b", 5, None))
    root.commit("g", "m1", 1, "commit", {0: 2, 1: 4})
    found = root.check()
    assert anomalies(found) == {"delivery_reorder": 1}, found.summary()
    assert found.stats["compacted_before_read[g]"] == 1


def test_a_record_delivered_then_compacted_is_fine_and_an_uncompacted_one_is_owed(tmp_path):
    root = compacted_root(tmp_path)
    root.deliver_values("g", (0, 0, "a", 0, "p:0"), (1, 0, "b", 1, "p:1"))
    root.clean((0, 0), (1, 0), (0, 1))
    root.deliver_values("g", (1, 2, "a", 4, "p:4"), (1, 3, "b", 5, None))  # 1@1 left and never delivered
    found = root.check()
    assert anomalies(found) == {"undelivered": 1}, found.summary()


def test_a_kafka_members_tombstone_is_named_by_the_log_record_at_its_offset(tmp_path):
    """A Kafka consumer sees no producer id; a tombstone has no value to name it by
    (``kafka_sink.named_by_value``): the checker takes the log record at its offset if key and
    (null) value agree, and a tombstone the log does not hold there is a phantom."""
    from deltalake import write_deltalake

    from chaos.kafka_sink import named_by_value
    from tests.unit.test_checker import CDF, SINK

    assert named_by_value(None) == (None, None)
    root = compacted_root(tmp_path)
    deliver_all_left(root, (0, 0, "a", 0, "p:0"), (0, 1, "a", 2, "p:2"), (1, 0, "b", 1, "p:1"), (1, 1, "b", 3, "p:3"),
                     (1, 2, "a", 4, "p:4"))
    unnamed = [dict(topic="t", partition=1, offset=o, leader_epoch=0, key=b"b", value=None, producer_id=None,
                    sequence=None) for o in (3, 1)]  # 1@3 is b's tombstone; 1@1 is not one
    write_deltalake(str(root.path / "sinks" / "g"), pa.Table.from_pylist(unnamed, SINK), mode="append", configuration=CDF)
    found = root.check()
    assert anomalies(found) == {"sink_phantom": 1}, found.summary()
    assert found.stats["delivered[g]"] == 6


def test_a_tombstone_in_another_partition_of_the_same_era_removed_is_no_resurrection(tmp_path):
    """One era (no resize): kp writes key c to partition 0 by hand, lakelog's producer p then
    writes c's tombstone to partition 1 (its partitioner's). Per partition, as Kafka cleans, the
    tombstone is partition 1's latest and goes past delete.retention.ms; partition 0's value is
    its own latest and stays. A correct compaction: no anomaly."""
    root = Compacted(tmp_path / "root")
    root.producer("kp", ["c"])
    root.producer("p", ["c"])
    root.topic(1, [(0, "ReadWrite", None), (1, "ReadWrite", None)])
    root.put((0, 0, "c", 0, "kp:0"), pid="kp")
    root.put((1, 0, "c", 0, None), pid="p")
    root.clean((1, 0))
    found = root.check(groups=())
    assert anomalies(found) == {}, found.summary()


def test_a_group_behind_only_offsets_compaction_removed_has_drained(tmp_path):
    """librdkafka fetches past the offsets compaction removed, but the position its member commits
    moves only with a consumed record (campaign seed 4263: a partition cleaned to its end while its
    group stood at 36 of 53): the drain counts them as consumed, up to the first record still held."""
    root = compacted_root(tmp_path)
    root.commit("g", "m1", 1, "commit", {0: 2, 1: 1})
    assert drain_gap(str(root.path), "t", "g") == "p1 at 1 of 4"
    root.clean((1, 1))  # b's older record, superseded by its tombstone
    assert drain_gap(str(root.path), "t", "g") == "p1 at 2 of 4", "a's latest at 2 is still to consume"
    root.commit("g", "m1", 1, "commit", {1: 3})
    root.clean((1, 0), (1, 3))  # the tombstone, past delete.retention.ms
    assert drain_gap(str(root.path), "t", "g") is None


def test_a_group_past_live_records_it_never_delivered_is_flagged_though_its_drain_is_complete(tmp_path):
    """The drain's skip over compacted offsets leaves the delivery check strict: a group whose
    committed offsets passed records still in the log without delivering them lost them."""
    root = compacted_root(tmp_path)
    root.clean((1, 0), (1, 1))  # b's older records; a's at p0 0 and 1 stay (never compacted)
    deliver_all_left(root, (1, 2, "a", 4, "p:4"), (1, 3, "b", 5, None))
    assert drain_gap(str(root.path), "t", "g") is None
    found = root.check()
    assert set(anomalies(found)) == {"undelivered"}, found.summary()


def test_a_group_standing_on_a_live_record_has_not_drained_whatever_compaction_removed_after_it(tmp_path):
    root = compacted_root(tmp_path)
    root.commit("g", "m1", 1, "commit", {0: 0, 1: 4})
    root.clean((1, 0), (1, 1), (0, 1))  # p0@1 removed, p0@0 still held
    assert drain_gap(str(root.path), "t", "g") == "p0 at 0 of 2"


def read_batch(root: Compacted, ranges: dict[int, tuple[int, int]], *records: tuple, at: int | None = None,
               log: str | None = None) -> None:
    """Group g's batch over ``ranges``, delivering ``records`` (partition, offset, key, sequence,
    value or None), its sink commit naming the log and the log version it read at (``at``; default
    the log's version now) as lakelog's members name them (``names.sink_commit_metadata``)."""
    from deltalake import CommitProperties, write_deltalake

    from log_store.names import sink_commit_metadata
    from tests.unit.test_checker import CDF, SINK

    location = str(root.path / "topics" / "t")
    meta = sink_commit_metadata("g", "t", "m1", ranges, log or location, DeltaTable(location).version() if at is None else at)
    write_deltalake(str(root.path / "sinks" / "g"), pa.Table.from_pylist(
        [dict(topic="t", partition=p, offset=o, leader_epoch=0, key=k.encode(), value=v and v.encode(), producer_id="p",
              sequence=s) for p, o, k, s, v in records], SINK),
        mode="append", configuration=CDF, schema_mode="merge",
        commit_properties=CommitProperties(custom_metadata={"userMetadata": meta}))
    root.commit("g", "m1", 1, "commit", {p: end for p, (_s, end) in ranges.items()})


def test_a_group_that_read_past_a_live_record_compaction_removed_only_later_is_flagged(tmp_path):
    """The batch read at a log version that still held a's records at p0 and delivered none of
    them: compaction removing them afterwards does not excuse it."""
    root = compacted_root(tmp_path)
    root.clean((1, 0), (1, 1))
    read_batch(root, {0: (0, 2), 1: (0, 4)}, (1, 2, "a", 4, "p:4"), (1, 3, "b", 5, None))  # past p0@0 and 1
    root.clean((0, 0), (0, 1))  # only now: a's records superseded by p1@2
    found = root.check()
    assert anomalies(found) == {"undelivered": 2}, found.summary()
    assert found.stats["compacted_before_read[g]"] == 2, "b's records were gone at the version read"


def test_a_group_that_read_once_compaction_had_removed_the_records_skipped_them(tmp_path):
    root = compacted_root(tmp_path)
    root.clean((1, 0), (1, 1))
    root.clean((0, 0), (0, 1))
    read_batch(root, {0: (0, 2), 1: (0, 4)}, (1, 2, "a", 4, "p:4"), (1, 3, "b", 5, None))
    found = root.check()
    assert anomalies(found) == {}, found.summary()
    assert found.stats["compacted_before_read[g]"] == 4


def test_a_batch_read_at_another_log_orders_nothing_against_this_ones_compactions(tmp_path):
    """Versions of another log (an earlier leader's root) are no order on this one's: the records
    are taken as removed before the group read them, as for a sink that names no log version."""
    root = compacted_root(tmp_path)
    root.clean((1, 0), (1, 1))
    read_batch(root, {0: (0, 2), 1: (0, 4)}, (1, 2, "a", 4, "p:4"), (1, 3, "b", 5, None),
               log=str(tmp_path / "other" / "topics" / "t"))
    root.clean((0, 0), (0, 1))
    found = root.check()
    assert anomalies(found) == {}, found.summary()
    assert found.stats["compacted_before_read[g]"] == 4


TXN_LOG = LOG.append(pa.field("control", pa.string()))


def put_txn(root: Compacted, *rows: tuple) -> None:
    """One append of rows (offset, producer, key or None, value or None, control or None) to partition 0."""
    root._write("topics/t", TXN_LOG, [dict(partition=0, offset=o, leader_epoch=0, key=k and k.encode(),
                                           value=v and v.encode(), producer_id=pid, sequence=o, control=c)
                                      for o, pid, k, v, c in rows])


def judged(root: Compacted) -> Findings:
    """``check_compaction`` of topic t's log alone (no resize)."""
    location = str(root.path / "topics" / "t")
    found = Findings()
    check_compaction(as_sent(read_log_changes(location)), read_current(location), compaction_removals(location), [],
                     found)
    return found


def transactions(root: Compacted) -> None:
    """a1 committed then a2 plain; b1 aborted; c1 plain then c2 aborted."""
    put_txn(root, (0, "tx", "a", "a1", None), (1, "tx", None, None, "commit"), (2, "plain", "a", "a2", None),
            (3, "tx", "b", "b1", None), (4, "tx", None, None, "abort"), (5, "plain", "c", "c1", None),
            (6, "tx", "c", "c2", None), (7, "tx", None, None, "abort"))


def test_aborted_records_and_then_markers_without_records_removed_are_what_the_log_promised(tmp_path):
    root = Compacted(tmp_path / "root")
    transactions(root)
    root.clean((0, 0), (0, 3), (0, 6))  # a1 superseded, the aborted b1 and c2
    root.clean((0, 1), (0, 4), (0, 7))  # later, past delete.retention.ms: the markers left without records
    found = judged(root)
    assert anomalies(found) == {}, found.summary()
    assert (found.stats["markers_removed"], found.stats["aborted_records_removed"],
            found.stats["records_compacted"]) == (3, 2, 1)


def test_a_marker_removed_while_its_transaction_has_a_record_is_lost(tmp_path):
    root = Compacted(tmp_path / "root")
    transactions(root)
    root.clean((0, 1))  # a1 is still there
    assert anomalies(judged(root)) == {"compaction_lost": 1}


def test_an_aborted_record_supersedes_nothing_and_goes_only_after_its_abort_marker(tmp_path):
    root = Compacted(tmp_path / "root")
    transactions(root)
    root.clean((0, 5))  # c1 removed for c2, which was aborted: c has no value left
    assert anomalies(judged(root)) == {"compaction_lost": 1}
    early = Compacted(tmp_path / "early")
    put_txn(early, (0, "tx", "d", "d1", None))
    early.clean((0, 0))  # its transaction still open
    put_txn(early, (1, "tx", None, None, "abort"))
    assert anomalies(judged(early)) == {"compaction_lost": 1}


def test_a_transactions_record_supersedes_only_once_its_commit_marker_is_in_the_log(tmp_path):
    root = Compacted(tmp_path / "root")
    put_txn(root, (0, "plain", "e", "e1", None), (1, "tx", "e", "e2", None))
    root.clean((0, 0))  # e2's transaction still open: it might have been aborted
    put_txn(root, (2, "tx", None, None, "commit"))
    assert anomalies(judged(root)) == {"compaction_lost": 1}
    later = Compacted(tmp_path / "later")
    put_txn(later, (0, "plain", "e", "e1", None), (1, "tx", "e", "e2", None), (2, "tx", None, None, "commit"))
    later.clean((0, 0))
    assert anomalies(judged(later)) == {}
