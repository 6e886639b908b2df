"""The campaign's checker on hand-made roots (written with delta-rs, no Spark): each anomaly class
is planted once and must be reported, and a clean root must report none."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, write_deltalake

from chaos.checker import check
from chaos.tables import drain_gap, group_activity

TP = pa.struct([("topic", pa.string()), ("partition", pa.int32())])
LOG = pa.schema([("partition", pa.int32()), ("offset", pa.int64()), ("leader_epoch", pa.int32()),
                 ("key", pa.binary()), ("value", pa.binary()), ("producer_id", pa.string()), ("sequence", pa.int64())])
SINK = pa.schema([("topic", pa.string()), *LOG])
TOPICS = pa.schema([("topic", pa.string()), ("topic_version", pa.int32()), ("partitions", pa.list_(pa.struct([
    ("partition", pa.int32()), ("leader_epoch", pa.int32()), ("mode", pa.string()), ("start_offset", pa.int64()),
    ("end_offset", pa.int64())])))])
GENERATIONS = pa.schema([("group", pa.string()), ("generation", pa.int32()),
                         ("members", pa.list_(pa.struct([("member_id", pa.string())]))),
                         ("assignment", pa.list_(pa.struct([("member_id", pa.string()), ("partitions", pa.list_(TP))]))),
                         ("topic_versions", pa.map_(pa.string(), pa.int32()))])
COMMITS = pa.schema([("group", pa.string()), ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
                     ("generation", pa.int32()), ("member_id", pa.string()), ("kind", pa.string()),
                     ("end_offset", pa.int64())])
CDF = {"delta.enableChangeDataFeed": "true"}


class Root:
    """A root written by hand: every call is one Delta commit."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.inputs: dict[str, str] = {}

    def _write(self, table: str, schema: pa.Schema, rows: list[dict]) -> None:
        write_deltalake(str(self.path / table), pa.Table.from_pylist(rows, schema), mode="append", configuration=CDF,
                        schema_mode="merge")

    def producer(self, pid: str, keys: list[str]) -> None:
        path = self.path.parent / f"{pid}.jsonl"
        path.write_text("".join(json.dumps({"key": k, "value": f"{pid}:{i}"}) + "\n" for i, k in enumerate(keys)))
        self.inputs[pid] = str(path)

    def append(self, *records: tuple, pid: str = "p") -> None:
        """records: (partition, offset, epoch, key, sequence)."""
        self._write("topics/t", LOG, [dict(partition=p, offset=o, leader_epoch=e, key=k.encode(), value=b"v",
                                           producer_id=pid, sequence=s) for p, o, e, k, s in records])

    def deliver(self, group: str, *records: tuple, pid: str = "p", sink: str | None = None, by: str | None = None) -> None:
        """One sink commit of ``records`` into ``sink`` (default: the group's own); ``by``: the group
        its commit metadata names, as lakelog writes it into a sink that groups may share."""
        meta = CommitProperties(custom_metadata={"userMetadata": json.dumps({"lakelog": "sink", "group": by})}) if by else None
        write_deltalake(str(self.path / "sinks" / (sink or group)), pa.Table.from_pylist(
            [dict(topic="t", partition=p, offset=o, leader_epoch=e, key=k.encode(), value=b"v", producer_id=pid,
                  sequence=s) for p, o, e, k, s in records], SINK),
            mode="append", configuration=CDF, schema_mode="merge", commit_properties=meta)

    def topic(self, version: int, partitions: list[tuple]) -> None:
        """partitions: (partition, mode, end_offset or None[, start_offset])."""
        self._write("control/topics", TOPICS, [dict(topic="t", topic_version=version, partitions=[
            dict(partition=p, leader_epoch=0, mode=m, end_offset=end, start_offset=(start[0] if start else 0))
            for p, m, end, *start in partitions])])

    def generation(self, group: str, n: int, assignment: dict[str, list[int]], topic_version: int = 1) -> None:
        self._write("control/group_generations", GENERATIONS, [dict(
            group=group, generation=n, members=[{"member_id": m} for m in assignment],
            assignment=[{"member_id": m, "partitions": [{"topic": "t", "partition": p} for p in ps]}
                        for m, ps in assignment.items()],
            topic_versions=[("t", topic_version)])])

    def commit(self, group: str, member: str, generation: int, kind: str, positions: dict[int, int],
               end: int | None = None, label: int | None = None) -> None:
        """One offset_commits commit; with ``label``, its rows carry it as ``commit_order``."""
        rows = [dict(group=group, topic="t", partition=p, offset=o, generation=generation, member_id=member, kind=kind,
                     end_offset=end) for p, o in positions.items()]
        if label is None:
            self._write("control/offset_commits", COMMITS, rows)
        else:
            self._write("control/offset_commits", COMMITS.append(pa.field("commit_order", pa.int64())),
                        [{**r, "commit_order": label} for r in rows])

    def check(self, groups=("g",), acked: dict | None = None, sinks: dict | None = None):
        inputs = {pid: range(len(Path(path).read_text().splitlines())) for pid, path in self.inputs.items()}
        return check(str(self.path), "t", self.inputs, acked if acked is not None else inputs,
                     {g: str(self.path / "sinks" / (sinks or {}).get(g, g)) for g in groups})


@pytest.fixture()
def clean(tmp_path) -> Root:
    """Two partitions, four records of keys a and b, delivered in order by group g's two members."""
    root = Root(tmp_path / "root")
    root.producer("p", ["a", "b", "a", "b"])
    root.topic(1, [(0, "ReadWrite", None), (1, "ReadWrite", None)])
    root.append((0, 0, 0, "a", 0), (1, 0, 0, "b", 1))
    root.append((0, 1, 0, "a", 2), (1, 1, 0, "b", 3))
    root.generation("g", 1, {"m1": [0], "m2": [1]})
    root.commit("g", "m1", 1, "acquire", {0: 0})
    root.commit("g", "m2", 1, "acquire", {1: 0})
    return root


def anomalies(found) -> dict[str, int]:
    return {k: v for k, v in found.counts.items() if v}


def test_clean_root_has_no_anomaly(clean):
    clean.deliver("g", (0, 0, 0, "a", 0), (1, 0, 0, "b", 1))
    clean.commit("g", "m1", 1, "commit", {0: 1})
    clean.deliver("g", (0, 1, 0, "a", 2), (1, 1, 0, "b", 3))
    clean.commit("g", "m1", 1, "commit", {0: 2})
    found = clean.check()
    assert anomalies(found) == {}, found.summary()
    assert found.stats["delivered[g]"] == 4


def test_log_anomalies(clean):
    clean.producer("q", ["c", "c", "c"])
    clean.append((0, 2, 0, "a", 2))  # p#2 again, at a fresh offset: a duplicate append
    clean.append((0, 2, 0, "z", 9))  # offset 2 of p0 reused, and p#9 was never produced
    clean.append((1, 5, 0, "b", 3), pid="q")  # a gap in p1 (2..4), q's key is wrong
    clean.append((1, 6, -1, "c", 2), (1, 7, 0, "c", 1), pid="q")  # epoch down; q/c's sequence down
    found = clean.check(groups=(), acked={"p": range(4), "q": range(3)})
    assert anomalies(found) == {"log_duplicate": 1, "offset_reuse": 1, "log_phantom": 2, "offset_gap": 3,
                                "epoch_decrease": 1, "log_key_reorder": 1, "lost_acknowledged": 1}, found.summary()


def test_sink_duplicate_reorder_phantom_and_undelivered(clean):
    clean.deliver("g", (0, 1, 0, "a", 2))
    clean.deliver("g", (0, 0, 0, "a", 0), (0, 1, 0, "a", 2))  # a before its predecessor's delivery; 0@1 twice
    clean.deliver("g", (1, 9, 0, "b", 1))  # no such log record
    found = clean.check()
    assert anomalies(found) == {"delivery_reorder": 1, "sink_duplicate": 1, "sink_phantom": 1, "undelivered": 2}


def test_a_delivery_that_is_not_the_record_the_surviving_log_holds_is_a_phantom(clean):
    """Delivered from a leader whose records at those offsets a truncation then took out (a consumer
    above the high watermark, or a log truncated under it): the sink row names an offset the log
    now holds another record at, or holds nothing at; and a row whose key is not the record's."""
    from deltalake import DeltaTable

    clean.deliver("g", (0, 0, 0, "a", 0), (1, 0, 0, "b", 1))
    clean.deliver("g", (0, 1, 0, "a", 2), (1, 1, 0, "b", 3))
    assert anomalies(clean.check()) == {}
    truncate = CommitProperties(custom_metadata={"userMetadata": '{"lakelog":"truncate"}'})
    DeltaTable(str(clean.path / "topics" / "t")).delete('"offset" >= 1', commit_properties=truncate)
    found = clean.check(acked={"p": [0, 1]})  # what was truncated was never acknowledged
    assert anomalies(found) == {"sink_phantom": 2}, found.summary()
    assert "the log holds nothing there" in found.samples["sink_phantom"][0]
    clean.producer("q", ["c"])
    clean.append((0, 1, 1, "c", 0), pid="q")  # the next leader's record at partition 0, offset 1
    found = clean.check(acked={"p": [0, 1], "q": [0]})
    assert anomalies(found) == {"sink_phantom": 2, "undelivered": 1}, found.summary()
    assert any("the log holds q#0 key 'c'" in s for s in found.samples["sink_phantom"])


def test_a_delivered_key_that_is_not_the_records_is_a_phantom(clean):
    clean.deliver("g", (0, 0, 0, "a", 0), (1, 0, 0, "b", 1), (0, 1, 0, "a", 2))
    clean.deliver("g", (1, 1, 0, "x", 3))  # p#3 at its offset, with another key
    found = clean.check()
    assert anomalies(found) == {"sink_phantom": 1, "undelivered": 1}, found.summary()


def test_expired_records_must_be_reported(clean):
    clean.topic(2, [(0, "ReadWrite", None), (1, "None", 2)])  # p1 retired at its end 2
    clean.deliver("g", (0, 0, 0, "a", 0), (0, 1, 0, "a", 2))
    found = clean.check()
    assert anomalies(found) == {"expired_unreported": 2}
    clean.commit("g", "m2", 1, "expired", {1: 0}, end=2)
    found = clean.check()
    assert anomalies(found) == {} and found.stats["expired[g]"] == 2


def test_partitions_retired_before_a_group_started_are_not_expected(clean):
    clean.topic(2, [(0, "ReadWrite", None), (1, "None", 2)])
    clean.generation("late", 1, {"x": [0]}, topic_version=2)
    clean.deliver("late", (0, 0, 0, "a", 0), (0, 1, 0, "a", 2))
    found = clean.check(groups=("late",))
    assert anomalies(found) == {}, found.summary()


def test_ownership_and_position_anomalies(clean):
    clean.generation("g", 1, {"m1": [0], "m2": [0]})  # generation 1 again, p0 twice
    clean.commit("g", "m2", 1, "acquire", {0: 0})  # m1 still holds p0 in generation 1
    clean.commit("g", "m1", 1, "commit", {0: 2})
    clean.commit("g", "m1", 1, "commit", {0: 1})
    clean.commit("g", "m1", 1, "commit", {1: 7})
    clean.deliver("g", (0, 0, 0, "a", 0), (0, 1, 0, "a", 2), (1, 0, 0, "b", 1), (1, 1, 0, "b", 3))
    found = clean.check()
    assert anomalies(found) == {"duplicate_generation": 1, "two_owners": 2, "position_backwards": 1,
                                "position_beyond_end": 1}, found.summary()


A = "kafka-m1-5b11a02b-2f6c-422f-8382-81ae8f4a6420"  # Kafka member ids: client.id and a UUID
A_AGAIN = "kafka-m1-6d195064-1fd1-42c7-9489-38b4208b3f81"
B = "kafka-m2-fcc3e0f4-1f8b-4df5-a6b3-f93afb7c5d0d"


def _kept_position_story(clean, back_to: int, member: str = A_AGAIN):
    """A Kafka client commits p0 up to 1, misses a generation in which another moves p0 to 2,
    rejoins under a new member id and commits ``back_to`` (kafka-python's kept position is 1)."""
    clean.generation("g", 2, {A: [0], B: [1]})
    clean.commit("g", A, 2, "commit", {0: 1})
    clean.generation("g", 3, {B: [0, 1]})
    clean.commit("g", B, 3, "commit", {0: 2})
    clean.generation("g", 4, {member: [0], B: [1]})
    clean.commit("g", member, 4, "commit", {0: back_to})
    clean.deliver("g", (0, 0, 0, "a", 0), (0, 1, 0, "a", 2), (1, 0, 0, "b", 1), (1, 1, 0, "b", 3))
    return clean.check()


def test_a_kafka_client_committing_its_own_kept_position_is_counted_apart(clean):
    found = _kept_position_story(clean, back_to=1)
    assert anomalies(found) == {}, found.summary()
    assert found.stats["kept_position[g]"] == 1


@pytest.mark.parametrize("back_to, member", [(0, A_AGAIN), (1, A), (1, "kafka-m3-6d195064-1fd1-42c7-9489-38b4208b3f81")])
def test_any_other_move_back_is_an_anomaly(clean, back_to, member):
    """Back to another value than the client's own last commit, by the same membership, or by
    another client: ``position_backwards``."""
    found = _kept_position_story(clean, back_to=back_to, member=member)
    assert anomalies(found) == {"position_backwards": 1}, found.summary()


def test_a_claim_lapses_when_its_holder_leaves_the_group(clean):
    clean.generation("g", 2, {"m2": [0, 1]})  # m1 was expelled: its claim on p0 lapsed
    clean.commit("g", "m2", 2, "acquire", {0: 0, 1: 0})
    clean.deliver("g", (0, 0, 0, "a", 0), (0, 1, 0, "a", 2), (1, 0, 0, "b", 1), (1, 1, 0, "b", 3))
    assert anomalies(clean.check()) == {}


def test_a_claim_held_into_a_later_generation_blocks_a_new_owner(clean):
    clean.generation("g", 2, {"m1": [1], "m2": [0]})  # m1 stayed in the group and never revoked p0
    clean.commit("g", "m2", 2, "acquire", {0: 0})
    clean.deliver("g", (0, 0, 0, "a", 0), (0, 1, 0, "a", 2), (1, 0, 0, "b", 1), (1, 1, 0, "b", 3))
    assert anomalies(clean.check()) == {"two_owners": 1}
    clean.commit("g", "m1", 2, "revoke", {0: 0})
    clean.commit("g", "m2", 2, "acquire", {0: 0})
    assert anomalies(clean.check()) == {"two_owners": 1}, "after the revocation the claim is fine"


def test_a_group_stands_at_a_grown_back_start_it_never_committed(clean):
    """Campaign seed 152: p1 retired at its end 2 and grown back (starting at 2) before group g
    read it; g's member owning p1 has nothing to deliver there, so never commits on it. The group
    has drained: it stands at the new incarnation's start, not at 0."""
    clean.commit("g", "m1", 1, "commit", {0: 2})
    assert drain_gap(str(clean.path), "t", "g") == "p1 at 0 of 2"
    clean.topic(2, [(0, "ReadWrite", None), (1, "None", 2)])
    clean.topic(3, [(0, "ReadWrite", None), (1, "ReadWrite", None, 2)])
    assert drain_gap(str(clean.path), "t", "g") is None
    clean.append((1, 2, 1, "b", 5))  # a record in the new incarnation: now g is behind there
    assert drain_gap(str(clean.path), "t", "g") == "p1 at 2 of 3"


def test_a_reported_expiry_moves_a_group_up(clean):
    clean.commit("g", "m1", 1, "commit", {0: 2, 1: 1})
    clean.topic(2, [(0, "ReadWrite", None), (1, "None", 2)])
    clean.topic(3, [(0, "ReadWrite", None), (1, "ReadWrite", None, 2)])
    assert drain_gap(str(clean.path), "t", "g") == "p1 at 1 of 2", "below the start, nothing reported"
    clean.commit("g", "m2", 1, "expired", {1: 1}, end=2)
    assert drain_gap(str(clean.path), "t", "g") is None


def test_a_rebalancing_group_shows_activity_though_its_positions_stand(clean):
    """The drain watchdog's measure of a slow group: claims and generations count as work."""
    before = group_activity(str(clean.path), "g")
    clean.generation("g", 2, {"m1": [0, 1]})
    clean.commit("g", "m1", 2, "generation", {-1: 2})
    clean.commit("g", "m1", 2, "acquire", {1: -1})
    assert drain_gap(str(clean.path), "t", "g") == "p0 at 0 of 2, p1 at 0 of 2"
    assert group_activity(str(clean.path), "g") == before + 2 and group_activity(str(clean.path), "other") == 0


def test_commit_order_labels_must_rise_with_commit_versions(clean):
    """lakelog orders positions by ``commit_order``; the checker holds the labels to Delta's
    commit versions (offset_commits versions 0 and 1 are the fixture's claims)."""
    clean.deliver("g", (0, 0, 0, "a", 0), (0, 1, 0, "a", 2), (1, 0, 0, "b", 1), (1, 1, 0, "b", 3))
    clean.commit("g", "m1", 1, "commit", {0: 1}, label=2)  # version 2
    clean.commit("g", "m2", 1, "commit", {1: 1}, label=3)  # version 3
    assert anomalies(clean.check()) == {}
    clean.commit("g", "m1", 1, "commit", {0: 2}, label=2)  # version 4: ties p0's label 2
    clean.commit("g", "m2", 1, "commit", {1: 1}, label=6)  # version 5: a label above its version
    clean.commit("g", "m2", 1, "commit", {1: 2}, label=5)  # version 6: below p1's label 6
    assert anomalies(clean.check()) == {"order_label_disagrees": 3}, clean.check().summary()
    clean.commit("g", "admin", 0, "deleted", {-1: -1}, label=5)  # version 7: version 5's label 6 is past it
    assert anomalies(clean.check()) == {"order_label_disagrees": 4}


def test_groups_sharing_a_sink_are_judged_each_on_its_own_commits(clean):
    """g and h each deliver every record once into one sink: each commit names its group, so
    neither sees the other's copy as a duplicate, and a reorder within one group's commits is found."""
    clean.generation("h", 1, {"n1": [0, 1]})
    clean.commit("h", "n1", 1, "acquire", {0: 0, 1: 0})
    for group in ("g", "h"):
        clean.deliver(group, (0, 0, 0, "a", 0), (1, 0, 0, "b", 1), sink="S", by=group)
        clean.deliver(group, (0, 1, 0, "a", 2), (1, 1, 0, "b", 3), sink="S", by=group)
    assert anomalies(clean.check(("g", "h"), sinks={"g": "S", "h": "S"})) == {}


def test_a_shared_sink_without_commit_metadata_counts_every_commit_for_every_group(clean):
    """Without the metadata the checker cannot tell the groups apart: each copy is a duplicate (so
    the attribution above is what makes the shared sink pass, not a blind eye)."""
    for group in ("g", "g"):
        clean.deliver(group, (0, 0, 0, "a", 0), (1, 0, 0, "b", 1), (0, 1, 0, "a", 2), (1, 1, 0, "b", 3), sink="S")
    assert anomalies(clean.check(("g",), sinks={"g": "S"})).get("sink_duplicate") == 4


def test_a_reorder_inside_one_groups_commits_of_a_shared_sink_is_found(clean):
    clean.deliver("h", (0, 0, 0, "a", 0), (1, 0, 0, "b", 1), (0, 1, 0, "a", 2), (1, 1, 0, "b", 3), sink="S", by="h")
    clean.deliver("g", (0, 1, 0, "a", 2), (1, 1, 0, "b", 3), sink="S", by="g")
    clean.deliver("g", (0, 0, 0, "a", 0), (1, 0, 0, "b", 1), sink="S", by="g")
    found = anomalies(clean.check(("g",), sinks={"g": "S"}))
    assert found.get("delivery_reorder") == 2 and "sink_duplicate" not in found


def test_records_below_a_raised_log_start_are_owed_only_by_a_group_that_stood_below_it(clean):
    """delete-records raised partition 1's log start to 2: a group that never stood there owes
    nothing below it (it starts at the log start); one that committed position 0 there owes a
    report of both records."""
    from deltalake import Transaction

    write_deltalake(str(clean.path / "topics/t"), pa.Table.from_pylist([], LOG), mode="append",
                    commit_properties=CommitProperties(app_transactions=[Transaction("lakelog.log_start.1", 2)]))
    clean.deliver("g", (0, 0, 0, "a", 0), (0, 1, 0, "a", 2))
    found = clean.check()
    assert anomalies(found) == {} and found.stats["deleted_before_read[g]"] == 2, found.summary()
    clean.commit("g", "m2", 1, "commit", {1: 0})
    assert anomalies(clean.check()) == {"expired_unreported": 2}
    clean.commit("g", "m2", 1, "expired", {1: 0}, end=2)
    assert anomalies(clean.check()) == {}


def raise_log_start(root: Root, partition: int, start: int, properties: dict[str, str] | None = None) -> None:
    """A delete-records commit on the hand-made log: the set transaction of ``partition``'s log
    start, and ``properties`` (the partition metadata lakelog keeps there) set just before it."""
    from deltalake import DeltaTable, Transaction

    if properties:
        DeltaTable(str(root.path / "topics/t")).alter.set_table_properties(properties, raise_if_not_exists=False)
    write_deltalake(str(root.path / "topics/t"), pa.Table.from_pylist([], LOG), mode="append", commit_properties=
                    CommitProperties(app_transactions=[Transaction(f"lakelog.log_start.{partition}", start)]))


def test_records_delete_records_removed_before_their_partition_was_retired_were_not_retired(clean):
    """Campaign seed 1003: delete-records raised partition 1's log start to 1 while it was live;
    then it was retired at its end 2 once every group stood there. Group g first read it after
    the raise, from the log start (it had no position there): record 1@0 was removed by
    delete-records, not by the retirement, and g owes no report of it. Group h had committed
    position 0 there: it owes one."""
    raise_log_start(clean, 1, 1)
    clean.topic(2, [(0, "ReadWrite", None), (1, "None", 2)])
    clean.generation("h", 1, {"n1": [0, 1]})
    clean.commit("h", "n1", 1, "commit", {1: 0})
    for group in ("g", "h"):
        clean.deliver(group, (0, 0, 0, "a", 0), (0, 1, 0, "a", 2), (1, 1, 0, "b", 3))
        clean.commit(group, "n1" if group == "h" else "m2", 1, "commit", {1: 2})
    found = clean.check(("g", "h"))
    assert anomalies(found) == {"expired_unreported": 1}, found.summary()
    assert found.samples["expired_unreported"] == ["h: p1@0 was deleted below the log start undelivered and not "
                                                   "reported expired"]
    assert found.stats["deleted_before_read[g]"] == 1


def test_records_a_log_start_raise_removed_in_an_earlier_incarnation_were_not_retired(clean):
    """Partition 1's log start raised to 1, the partition retired at 2 and grown back from 2, its
    new records 2 and 3 written, the log start raised to 3: group g, which read each incarnation
    from its log start, owes nothing of either (the current log start alone, 3, hides that 1@0
    went in the first incarnation's raise, before its retirement). Group h, which never read the
    first incarnation, owes a report of 1@1: it was in the log when the partition was retired."""
    raise_log_start(clean, 1, 1)
    clean.topic(2, [(0, "ReadWrite", None), (1, "None", 2)])
    clean.topic(3, [(0, "ReadWrite", None), (1, "ReadWrite", None, 2)])
    clean.producer("q", ["b", "b"])
    clean.append((1, 2, 1, "b", 0), (1, 3, 1, "b", 1), pid="q")
    raise_log_start(clean, 1, 3, {"lakelog.partition.1.start_offset": "2"})
    clean.generation("h", 1, {"n1": [0, 1]})
    clean.deliver("g", (0, 0, 0, "a", 0), (0, 1, 0, "a", 2), (1, 1, 0, "b", 3))
    clean.deliver("h", (0, 0, 0, "a", 0), (0, 1, 0, "a", 2))
    for group in ("g", "h"):
        clean.deliver(group, (1, 3, 1, "b", 1), pid="q")
    clean.commit("g", "m2", 1, "commit", {1: 4})
    found = clean.check(("g", "h"))
    assert anomalies(found) == {"expired_unreported": 1}, found.summary()
    assert found.samples["expired_unreported"] == ["h: p1@1 was retired undelivered and not reported expired"]
    assert found.stats["deleted_before_read[g]"] == 2 and found.stats["deleted_before_read[h]"] == 2


def test_a_log_start_raised_on_a_retired_partition_does_not_excuse_its_retired_records(clean):
    """lakelog refuses to raise a retired partition's log start; were one raised anyway, its
    records below it were still retired (in the log when it was retired) and are owed a report."""
    clean.topic(2, [(0, "ReadWrite", None), (1, "None", 2)])
    raise_log_start(clean, 1, 1, {"lakelog.partition.1.mode": "None"})
    clean.deliver("g", (0, 0, 0, "a", 0), (0, 1, 0, "a", 2), (1, 1, 0, "b", 3))
    found = clean.check()
    assert anomalies(found) == {"expired_unreported": 1}, found.summary()
    assert "was retired undelivered" in found.samples["expired_unreported"][0]


def test_records_an_earlier_leader_held_below_the_log_start_were_removed_not_lost(tmp_path):
    """Campaign seed 1652: group g read partition 1's offsets 0 and 1 at the leader, then
    delete-records raised the log start there to 2; the follower, copying from the log start, never
    held them, and was then elected. Judged by the new leader's log alone they were lost and their
    delivery a phantom; with the earlier leader's log they were appended, then removed."""
    old = Root(tmp_path / "old")
    old.append((0, 0, 0, "a", 0), (1, 0, 0, "b", 1))
    old.append((0, 1, 0, "a", 2), (1, 1, 0, "b", 3))
    raise_log_start(old, 1, 2)
    new = Root(tmp_path / "new")
    new.producer("p", ["a", "b", "a", "b", "b"])
    new.topic(1, [(0, "ReadWrite", None), (1, "ReadWrite", None)])
    new.append((0, 0, 0, "a", 0), (0, 1, 0, "a", 2))
    raise_log_start(new, 1, 2)
    new.append((1, 2, 0, "b", 4))
    old.append((1, 2, 0, "b", 4), (1, 3, 0, "x", 9))  # at or above the log start another root counts for nothing
    new.generation("g", 1, {"m1": [0, 1]})
    new.commit("g", "m1", 1, "acquire", {0: 0, 1: 0})
    new.deliver("g", (0, 0, 0, "a", 0), (1, 0, 0, "b", 1), (0, 1, 0, "a", 2), (1, 1, 0, "b", 3), (1, 2, 0, "b", 4))
    new.commit("g", "m1", 1, "commit", {0: 2, 1: 3})
    assert anomalies(new.check()) == {"lost_acknowledged": 2, "offset_gap": 2, "sink_phantom": 2}
    found = check(str(new.path), "t", new.inputs, {"p": range(5)}, {"g": str(new.path / "sinks" / "g")},
                  other_logs=[str(old.path / "topics" / "t")])
    assert anomalies(found) == {}, found.summary()


def test_replica_divergence_and_a_truncation_left_out_of_what_was_appended(clean, tmp_path):
    from deltalake import DeltaTable

    from chaos.checker import replica_divergence
    from chaos.checker_reads import read_log_changes

    copy = Root(tmp_path / "us")
    copy.append((0, 0, 0, "a", 0), (1, 0, 0, "b", 1))
    copy.append((0, 1, 0, "a", 9), (1, 1, 0, "b", 3))  # a different record at partition 0, offset 1
    leader, follower = str(clean.path / "topics" / "t"), str(copy.path / "topics" / "t")
    assert len(replica_divergence([leader, follower])) == 1
    assert replica_divergence([leader, leader]) == []
    # a truncation (a DELETE whose metadata says so) takes its records out; another DELETE does not
    DeltaTable(follower).delete("partition = 0 AND \"offset\" >= 1",
                                commit_properties=CommitProperties(custom_metadata={"userMetadata": '{"lakelog":"truncate"}'}))
    assert sorted((r["partition"], r["offset"]) for r in read_log_changes(follower)) == [(0, 0), (1, 0), (1, 1)]
    DeltaTable(leader).delete("partition = 1")
    assert len(read_log_changes(leader)) == 4


# -- records written through `lakelog serve` ---------------------------------------------------------
def _served(root: Root, *records: tuple, sink: str | None = None) -> None:
    """One commit of records a Kafka producer ``kp`` wrote through `lakelog serve` (to the log, or
    with ``sink`` to that group's sink as lakelog's members copy them): the server's producer id
    (``kafka-<id>-<partition addressed>``) and sequence (epoch << 40 | sequence), the value naming
    the producer and its input's line. records: (partition, offset, key, line, partition addressed, epoch)."""
    rows = [dict(partition=p, offset=o, leader_epoch=0, key=k.encode(), value=f"kp:{n}".encode(),
                 producer_id=f"kafka-8817-{addressed}", sequence=epoch << 40 | n) for p, o, k, n, addressed, epoch in records]
    if sink is None:
        root._write("topics/t", LOG, rows)
    else:
        write_deltalake(str(root.path / "sinks" / sink), pa.Table.from_pylist([{"topic": "t", **r} for r in rows], SINK),
                        mode="append", configuration=CDF, schema_mode="merge")


@pytest.fixture()
def served(tmp_path) -> Root:
    """Kafka producer kp's three records through a server, from two of its streams (the client
    addressed partition 0, then 1) and two epochs; lakelog's group g delivers them, copying the
    server's ids into its sink."""
    root = Root(tmp_path / "root")
    root.producer("kp", ["a", "b", "a"])
    root.topic(1, [(0, "ReadWrite", None), (1, "ReadWrite", None)])
    _served(root, (0, 0, "a", 0, 0, 0), (1, 0, "b", 1, 0, 0))
    _served(root, (0, 1, "a", 2, 1, 1))
    root.generation("g", 1, {"m1": [0, 1]})
    root.commit("g", "m1", 1, "acquire", {0: 0, 1: 0})
    return root


def test_records_written_through_serve_are_judged_as_their_values_name_them(served):
    _served(served, (0, 0, "a", 0, 0, 0), (1, 0, "b", 1, 0, 0), (0, 1, "a", 2, 1, 1), sink="g")
    served.commit("g", "m1", 1, "commit", {0: 2, 1: 1})
    found = served.check(acked={"kp": {0, 1, 2}})
    assert anomalies(found) == {}, found.summary()  # not phantoms of kp, nor phantoms in the sink
    assert found.stats["delivered[g]"] == 3


def test_a_served_record_landing_twice_under_two_streams_is_a_duplicate_and_out_of_order(served):
    """The client moved key a to another stream and its first record landed again after the
    second: the server's ids differ, the record is kp#0 both times."""
    _served(served, (0, 2, "a", 0, 1, 1))
    found = served.check(groups=())
    assert anomalies(found) == {"log_duplicate": 1, "log_key_reorder": 1}, found.summary()


def test_an_acknowledged_served_record_missing_from_the_log_is_lost(tmp_path):
    root = Root(tmp_path / "root")
    root.producer("kp", ["a", "b"])
    root.topic(1, [(0, "ReadWrite", None)])
    _served(root, (0, 0, "a", 0, 0, 0))
    assert anomalies(root.check(groups=(), acked={"kp": {0, 1}})) == {"lost_acknowledged": 1}


def test_a_kafka_members_sink_names_each_record_by_its_value(served):
    """A Kafka consumer sees no producer ids: its sink rows name the record as its value does
    (chaos.kafka_sink); a row naming another record than the log holds there is a phantom."""
    sink = served.path / "sinks" / "g"
    write_deltalake(str(sink), pa.Table.from_pylist([
        dict(topic="t", partition=0, offset=0, leader_epoch=0, key=b"a", value=b"kp:0", producer_id="kp", sequence=0),
        dict(topic="t", partition=1, offset=0, leader_epoch=0, key=b"b", value=b"kp:1", producer_id="kp", sequence=1),
        dict(topic="t", partition=0, offset=1, leader_epoch=0, key=b"a", value=b"kp:1", producer_id="kp", sequence=1)],
        SINK), mode="append", configuration=CDF, schema_mode="merge")
    found = served.check()
    assert anomalies(found) == {"sink_phantom": 1, "undelivered": 1}, found.summary()


# -- a stream's sink: Kafka's columns, no producer ids -----------------------------------------
STREAM_SINK = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
                         ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")),
                         ("timestampType", pa.int32()), ("leader_epoch", pa.int32())])


def _streamed(root: Root, group: str, *records: tuple) -> None:
    """One micro-batch of a stream into its Delta sink: records (partition, offset, key[, value])."""
    write_deltalake(str(root.path / "sinks" / group), pa.Table.from_pylist([
        dict(key=k.encode(), value=(v[0] if v else "v").encode(), topic="t", partition=p, offset=o, timestamp=None,
             timestampType=0, leader_epoch=0) for p, o, k, *v in records], STREAM_SINK),
        mode="append", configuration=CDF)


def _checkpoint(root: Root, since: int) -> str:
    """A stream's checkpoint whose offset log's first batch says it first read topic t at ``since``."""
    folder = root.path.parent / "checkpoint" / "offsets"
    folder.mkdir(parents=True, exist_ok=True)
    offset = {"v": 1, "topics": {"t": {"id": "log-id", "since": since, "positions": {"0": 0, "1": 0}}}}
    (folder / "0").write_text("v1\n" + json.dumps({"batchWatermarkMs": 0}) + "\n" + json.dumps(offset))
    return str(folder.parent)


def _check_stream(root: Root, group: str = "s", since: int = 1):
    inputs = {pid: range(len(Path(path).read_text().splitlines())) for pid, path in root.inputs.items()}
    return check(str(root.path), "t", root.inputs, inputs, {},
                 streams={group: (str(root.path / "sinks" / group), _checkpoint(root, since))})


def test_a_streams_sink_is_judged_by_the_log_record_at_each_offset(clean):
    """A stream's sink has no producer ids: a row is the log record at its offset when it holds
    that record's key and value; each key in order, each record once, nothing the log did not hold."""
    _streamed(clean, "s", (0, 0, "a"), (1, 0, "b"))
    _streamed(clean, "s", (0, 1, "a"), (1, 1, "b"))
    found = _check_stream(clean)
    assert anomalies(found) == {}, found.summary()
    assert found.stats["delivered[s]"] == 4


def test_a_streams_duplicate_reorder_and_phantom_are_found(clean):
    _streamed(clean, "s", (0, 1, "a"), (1, 0, "b"))
    _streamed(clean, "s", (0, 0, "a"), (1, 0, "b"))  # a's first record after its second; b twice
    _streamed(clean, "s", (1, 1, "b", "other"))  # the log holds another value there
    found = _check_stream(clean)
    assert anomalies(found) == {"delivery_reorder": 1, "sink_duplicate": 1, "sink_phantom": 1, "undelivered": 1}, \
        found.summary()


def test_partitions_retired_before_a_stream_first_read_the_topic_are_not_expected(clean):
    """The stream's checkpoint says at which topic version it first read the topic (``since``):
    a partition retired before is not the stream's; one retired after it is, read or reported."""
    clean.topic(2, [(0, "ReadWrite", None), (1, "None", 2)])
    _streamed(clean, "s", (0, 0, "a"), (0, 1, "a"))
    assert anomalies(_check_stream(clean, since=2)) == {}


def test_partitions_retired_after_a_stream_first_read_the_topic_are_owed(clean):
    clean.topic(2, [(0, "ReadWrite", None), (1, "None", 2)])
    _streamed(clean, "s", (0, 0, "a"), (0, 1, "a"))
    found = _check_stream(clean, since=1)
    assert anomalies(found) == {"expired_unreported": 2}, found.summary()
    clean.commit("s", "stream:s", -1, "expired", {1: 0}, end=2)  # the stream reported them (failOnDataLoss=false)
    found = _check_stream(clean, since=1)
    assert anomalies(found) == {} and found.stats["expired[s]"] == 2, found.summary()


def test_a_stream_writers_records_are_judged_as_their_values_name_them(tmp_path):
    """A stream writes under ``<producerId>:<query id>`` with sequences of its own: its records are
    the input's by their values, so a record landing twice (a replayed micro-batch) is a duplicate
    and one never landed is lost."""
    root = Root(tmp_path / "root")
    root.producer("sw", ["a", "a", "b"])
    root.topic(1, [(0, "ReadWrite", None)])
    rows = [dict(partition=0, offset=o, leader_epoch=0, key=k.encode(), value=f"sw:{n}".encode(),
                 producer_id="sw:9f1c", sequence=100 + o) for o, (k, n) in enumerate([("a", 0), ("a", 1), ("b", 2)])]
    root._write("topics/t", LOG, rows)
    assert anomalies(root.check(groups=())) == {}
    root._write("topics/t", LOG, [{**rows[1], "offset": 3, "sequence": 103}])  # batch 0 landed again
    assert anomalies(root.check(groups=())) == {"log_duplicate": 1}
    other = Root(tmp_path / "other")
    other.producer("sw", ["a", "a", "b"])
    other.topic(1, [(0, "ReadWrite", None)])
    other._write("topics/t", LOG, rows[:2])
    assert anomalies(other.check(groups=())) == {"lost_acknowledged": 1}
