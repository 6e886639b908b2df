"""Kafka's Java consumer with ``group.protocol=consumer`` (KIP-848) through `lakelog serve`: the server
computes the group's assignment with the assignor the members name (``group.remote.assignor``:
uniform or range), moves partitions between members without two members ever holding one, and the
group's offsets are lakelog's group tables, so `kafka-consumer-groups.sh --describe`, `lakelog
groups describe` and SQL show the same positions. The resize scenario is in test_group_resize.py."""

from __future__ import annotations

import signal
import subprocess
import uuid
from pathlib import Path

import pytest

from control_plane.fast_sql import FastSql
from control_plane.group.describe import describe_group
from control_plane.group.offsets import GroupOffsets
from control_plane.group.store import GroupTables
from tests.serve.conftest import bootstrap
from tests.serve.kafka_tools import kafka
from tests.serve.group_resize import Events, java

pytestmark = pytest.mark.kafka_clients


def consumer(events: Events, name: str, boot: str, topic: str, group: str, assignor: str | None, config: Path):
    args = ["--bootstrap-server", boot, "--topic", topic, "--group-id", group, "--verbose", "--reset-policy", "earliest",
            "--enable-autocommit", "--group-protocol", "consumer", "--command-config", str(config)]
    if assignor:
        args += ["--group-remote-assignor", assignor]
    return events.start(name, "org.apache.kafka.tools.VerifiableConsumer", *args)


def holds(events: Events, who: str) -> set[int]:
    """The partitions consumer ``who`` holds now, from its rebalance events in order."""
    held: set[int] = set()
    with events.lock:
        lines = [e for n, e in events.lines if n == who]
    for e in lines:
        parts = {p["partition"] for p in e.get("partitions", [])}
        if e.get("name") == "partitions_assigned":
            held |= parts
        elif e.get("name") in ("partitions_revoked", "partitions_lost"):
            held -= parts
    return held


def describe(boot: str, group: str) -> tuple[dict[int, int], dict[int, str], str]:
    """kafka-consumer-groups.sh --describe: each partition's committed offset and consumer id."""
    out = subprocess.run([*java(), "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server",
                          boot, "--describe", "--group", group], capture_output=True, text=True, timeout=120)
    offsets, owners = {}, {}
    for line in out.stdout.splitlines():
        cols = line.split()
        if cols and cols[0] == group and cols[2].isdigit():
            offsets[int(cols[2])] = int(cols[3]) if cols[3].isdigit() else -1
            owners[int(cols[2])] = cols[6]
    return offsets, owners, out.stdout + out.stderr[-3000:]


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_a_kip_848_group_shares_a_topic_and_its_offsets_are_lakelogs(spark, served, root, tmp_path, assignor):
    boot = bootstrap(served)
    served.ctx.admin.create("t", 4)
    kafka("console-producer", "--bootstrap-server", boot, "--topic", "t", "--reader-property", "parse.key=true",
          "--reader-property", "key.separator=:", input="".join(f"k{i}:v{i}\n" for i in range(40)))
    config = tmp_path / "consumer.properties"
    config.write_text("metadata.max.age.ms=1000\nauto.commit.interval.ms=200\n")
    events = Events(tmp_path)
    try:
        for name in ("c1", "c2"):
            consumer(events, name, boot, "t", "g", assignor, config)
        events.wait(lambda: len({e["value"] for _n, e in events.named("record_data")}) == 40, 120, "every record read")
        held = lambda who: holds(events, who)  # noqa: E731
        events.wait(lambda: held("c1") and held("c2") and held("c1") | held("c2") == set(range(4)), 120,
                    "the partitions shared by both members")
        assert not held("c1") & held("c2")
        if assignor == "range":  # contiguous ranges, in member id order
            assert sorted([sorted(held("c1")), sorted(held("c2"))]) == [[0, 1], [2, 3]]

        ends = {p: n for p, n in served.ctx.view("t").snapshot.log_ends.items()}
        events.wait(lambda: GroupOffsets(spark, root).committed("g", "t") == ends, 60, "the offsets committed")
        offsets, owners, said = describe(boot, "g")
        assert offsets == ends, said
        assert len(set(owners.values())) == 2 and "-" not in owners.values(), said

        sql = FastSql(root).query("SELECT partition, offset FROM group_offsets WHERE `group` = 'g' AND topic = 't'", 100)
        assert {r["partition"]: r["offset"] for r in sql} == ends  # lakelog sql
        ours = describe_group(GroupTables(spark, root), "g")
        assert (ours.protocol, ours.assignor) == ("consumer", assignor)
        assert {p.partition: p.committed_offset for p in ours.partitions} == ends
        assert sorted(m.partitions for m in ours.members if m.live) == sorted(
            [[f"t-{p}" for p in sorted(held(c))] for c in ("c1", "c2")])

        events.procs["c2"].send_signal(signal.SIGTERM)  # leaves the group: c1 takes its partitions
        events.wait(lambda: held("c1") == set(range(4)), 60, "c1 holds every partition")
    finally:
        events.close()


def test_a_kip_848_member_and_a_classic_member_do_not_share_a_group(spark, served, root, tmp_path):
    """A group is of one protocol at a time: a classic consumer joining a KIP-848 group with members
    is refused (INCONSISTENT_GROUP_PROTOCOL), as lakelog does not convert groups between protocols;
    once the KIP-848 members have left, classic members take the group on from its offsets."""
    boot = bootstrap(served)
    served.ctx.admin.create("t", 1)
    kafka("console-producer", "--bootstrap-server", boot, "--topic", "t", input="a\nb\n")
    source = Path(__file__).parent / "java" / "GroupProtocolConsumer.java"
    config = tmp_path / "consumer.properties"
    config.write_text("auto.commit.interval.ms=200\n")
    events = Events(tmp_path)
    try:
        consumer(events, "c1", boot, "t", "g", None, config)
        events.wait(lambda: len(events.named("record_data")) == 2, 120, "the KIP-848 member read")
        classic = subprocess.run([*java(), str(source), boot, "t", "g", "classic"], capture_output=True, text=True,
                                 timeout=120)
        assert classic.stdout.startswith("org.apache.kafka.common.errors.InconsistentGroupProtocolException"), (
            classic.stdout, classic.stderr[-2000:])
        events.wait(lambda: GroupOffsets(spark, root).committed("g", "t") == {0: 2}, 60, "the KIP-848 member committed")
        events.procs["c1"].send_signal(signal.SIGTERM)
        events.wait(lambda: events.named("shutdown_complete", "c1"), 60, "the KIP-848 member left")
    finally:
        events.close()
    kafka("console-producer", "--bootstrap-server", boot, "--topic", "t", input="c\nd\n")
    read = kafka("console-consumer", "--bootstrap-server", boot, "--topic", "t", "--group", "g", "--max-messages", "2",
                 "--timeout-ms", "30000")
    assert read.split() == ["c", "d"]  # from the KIP-848 group's offsets, committed as a classic group's
    assert GroupOffsets(spark, root).committed("g", "t") == {0: 4}


def test_the_answers_of_a_kip_848_group_on_the_wire(served):
    """ConsumerGroupHeartbeat and ConsumerGroupDescribe as Kafka's coordinator answers them, and
    OffsetCommit, DescribeGroups and JoinGroup on a KIP-848 group."""
    from kio.schema.errors import ErrorCode

    from tests.serve.raw import RawClient

    served.ctx.admin.create("t", 2)
    topic_id = uuid.UUID(served.ctx.view("t").topic_id)
    client = RawClient(served.port)
    assert [c.error_code for c in client.call(10, 4, {"key_type": 0, "coordinator_keys": ["g", "nobody"]}).coordinators] == [0, 0]

    def beat(**values):
        return client.call(68, 1, {"group_id": "g", "member_id": "m1", "member_epoch": 0, "rebalance_timeout": 60000,
                                   "subscribed_topic_names": ["t"], "topic_partitions": [], **values})

    def commit(epoch: int):
        return client.call(8, 9, {"group_id": "g", "generation_id_or_member_epoch": epoch, "member_id": "m1",
                                  "topics": [{"name": "t", "partitions": [{"partition_index": 0, "committed_offset": 0,
                                                                           "committed_metadata": ""}]}]}
                           ).topics[0].partitions[0].error_code

    assert beat(server_assignor="sticky").error_code == ErrorCode.unsupported_assignor
    assert beat(subscribed_topic_regex="t.*").error_code == ErrorCode.invalid_request
    joined = beat(server_assignor="range")
    assert joined.error_code == 0 and joined.member_id == "m1" and joined.member_epoch > 0
    assert [(tp.topic_id, tp.partitions) for tp in joined.assignment.topic_partitions] == [(topic_id, (0, 1))]
    assert joined.heartbeat_interval.total_seconds() == 0.5
    assert commit(joined.member_epoch - 1) == ErrorCode.stale_member_epoch
    assert commit(joined.member_epoch) == 0

    described = client.call(69, 1, {"group_ids": ["g", "nobody"], "include_authorized_operations": False}).groups
    assert (described[0].group_state, described[0].assignor_name, described[0].group_epoch) == (
        "Stable", "range", joined.member_epoch)
    member = described[0].members[0]
    assert (member.member_id, member.member_epoch, member.member_type) == ("m1", joined.member_epoch, 1)
    assert [(tp.topic_name, tp.partitions) for tp in member.assignment.topic_partitions] == [("t", (0, 1))]
    assert described[1].error_code == ErrorCode.group_id_not_found  # the admin client asks DescribeGroups next
    classic = client.call(15, 6, {"groups": ["g"], "include_authorized_operations": False}).groups[0]
    assert (classic.error_code, classic.error_message) == (ErrorCode.group_id_not_found, "Group g is not a classic group.")
    joining = client.call(11, 5, {"group_id": "g", "session_timeout": 10000, "rebalance_timeout": 10000, "member_id": "",
                                  "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}]})
    assert joining.error_code == ErrorCode.inconsistent_group_protocol

    left = beat(member_epoch=-1, rebalance_timeout=-1, subscribed_topic_names=None, topic_partitions=None)
    assert (left.error_code, left.member_epoch) == (0, -1)
    after = client.call(69, 1, {"group_ids": ["g"], "include_authorized_operations": False}).groups[0]
    assert (after.group_state, after.members) == ("Empty", ())
    client.close()
