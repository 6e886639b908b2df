"""The classic group protocol's requests (FindCoordinator, JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups), answered by
``serve.groups.Coordinator`` with offsets in lakelog's group tables. OffsetCommit, ListGroups,
DescribeGroups and DeleteGroups answer for KIP-848's groups too (``serve.consumer_groups``)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from log_store.errors import LOST_ROOT, InvalidConfigurationError, LakelogError, StorageError, UnknownTopicError
from log_store.names import check_group_name
from serve.consumer_rules import ConsumerGroupError
from serve.errors import code_of
from serve.group_tables import LostGroupError
from serve.groups import STABLE, GroupError

if TYPE_CHECKING:
    from serve.server import Connection, Server
    from serve.wire import Request

GROUP, TRANSACTION = 0, 1  # FindCoordinator key types


async def existing_partitions(server: "Server", topic: str) -> set[int] | None:
    """The partitions ``topic`` has, on which a group may keep positions (empty: not a live topic,
    answered UNKNOWN_TOPIC_OR_PARTITION as Kafka's broker answers a partition its metadata lacks;
    None: its log cannot be read now, its root lost: the positions are kept, as a broker keeps
    those of a partition without a leader)."""
    try:
        view = await server.ctx.run(server.ctx.view, topic, 1.0)
    except UnknownTopicError:  # TopicDeletedError too
        return set()
    except LOST_ROOT:
        return None
    return set(view.snapshot.metadata.partitions)


def _ms(value) -> int:
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


async def _guard(server: "Server", conn: "Connection", group: str, operation: str = "READ") -> str | None:
    """The error code name a group request is refused with before anything else, or None."""
    try:
        check_group_name(group)
    except InvalidConfigurationError:
        return "INVALID_GROUP_ID"
    if not server.allowed(conn, operation, "GROUP", group):
        return "GROUP_AUTHORIZATION_FAILED"
    if not await server.coordinates(group):
        return "NOT_COORDINATOR"
    return None


async def find_coordinator(server: "Server", conn: "Connection", request: "Request") -> dict:
    body = request.body
    keys = list(body.coordinator_keys) if hasattr(body, "coordinator_keys") else [body.key]
    key_type = getattr(body, "key_type", GROUP)
    found = []
    for key in keys:
        resource, refusal = ("GROUP", "GROUP_AUTHORIZATION_FAILED") if key_type == GROUP else (
            "TRANSACTIONAL_ID", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
        if key_type in (GROUP, TRANSACTION) and not server.allowed(conn, "DESCRIBE", resource, key):
            found.append({"key": key, "node_id": -1, "host": "", "port": -1,
                          "error_code": code_of(refusal), "error_message": None})
            continue
        # a transactional id's coordinator is the server asked: every server reads and records its
        # row in the root's ``transactions`` table, each change fenced by the row's version
        broker = await server.coordinator_of(key) if key_type == GROUP else server.cluster.me
        if broker is None:
            found.append({"key": key, "node_id": -1, "host": "", "port": -1,
                          "error_code": code_of("COORDINATOR_NOT_AVAILABLE"), "error_message": None})
        else:
            found.append({"key": key, "node_id": broker.node_id, "host": broker.host, "port": broker.port,
                          "error_code": 0, "error_message": None})
    if hasattr(body, "coordinator_keys"):
        return {"throttle_time": 0, "coordinators": found}
    return {"throttle_time": 0, **found[0]}


async def join_group(server: "Server", conn: "Connection", request: "Request") -> dict:
    body = request.body
    base = {"throttle_time": 0, "generation_id": -1, "protocol_type": None, "protocol_name": None, "leader": "",
            "member_id": body.member_id, "members": []}
    settings = server.settings
    session = _ms(body.session_timeout)
    refused = await _guard(server, conn, body.group_id)
    if not refused and not settings.group_min_session_timeout_ms <= session <= settings.group_max_session_timeout_ms:
        refused = "INVALID_SESSION_TIMEOUT"  # group.min/max.session.timeout.ms
    elif not refused and server.consumer_groups.live(body.group_id):
        refused = "INCONSISTENT_GROUP_PROTOCOL"  # its members use KIP-848's protocol (group.protocol=consumer)
    elif not refused:
        server.consumer_groups.drop(body.group_id)  # an empty KIP-848 group becomes a classic one
    if refused:
        return {**base, "error_code": code_of(refused)}
    rebalance = _ms(getattr(body, "rebalance_timeout", body.session_timeout))
    try:
        answer = await server.coordinator.join(
            body.group_id, body.member_id, getattr(body, "group_instance_id", None), request.client_id or "",
            conn.peer.rsplit(":", 1)[0], session, rebalance, body.protocol_type,
            [(p.name, p.metadata) for p in body.protocols], require_known_id=request.version >= 4)
    except GroupError as exc:
        return {**base, "error_code": code_of(exc.code), "member_id": exc.member_id or body.member_id}
    return {**base, "error_code": 0, **answer}


async def sync_group(server: "Server", conn: "Connection", request: "Request") -> dict:
    body = request.body
    base = {"throttle_time": 0, "protocol_type": None, "protocol_name": None, "assignment": b""}
    refused = await _guard(server, conn, body.group_id)
    if refused:
        return {**base, "error_code": code_of(refused)}
    try:
        protocol, assignment = await server.coordinator.sync(
            body.group_id, body.member_id, body.generation_id, {a.member_id: a.assignment for a in body.assignments})
    except GroupError as exc:
        return {**base, "error_code": code_of(exc.code)}
    group = server.coordinator.groups.get(body.group_id)
    if group is not None and body.member_id == group.leader:
        topics = sorted({t for m in group.members.values() for t in m.topics})
        asyncio.get_running_loop().create_task(server.ctx.run(server.gates.report_expired_on, body.group_id, topics))
    return {**base, "error_code": 0, "protocol_type": group.protocol_type if group else None,
            "protocol_name": protocol, "assignment": assignment}


async def heartbeat(server: "Server", conn: "Connection", request: "Request") -> dict:
    body = request.body
    refused = await _guard(server, conn, body.group_id)
    if refused:
        return {"throttle_time": 0, "error_code": code_of(refused)}
    try:
        server.coordinator.heartbeat(body.group_id, body.member_id, body.generation_id)
    except GroupError as exc:
        return {"throttle_time": 0, "error_code": code_of(exc.code)}
    return {"throttle_time": 0, "error_code": 0}


async def leave_group(server: "Server", conn: "Connection", request: "Request") -> dict:
    body = request.body
    ids = [m.member_id for m in body.members] if hasattr(body, "members") else [body.member_id]
    refused = await _guard(server, conn, body.group_id)
    if refused:
        return {"throttle_time": 0, "error_code": code_of(refused), "members": []}
    left = server.coordinator.leave(body.group_id, ids)
    top = "NONE" if hasattr(body, "members") else left[ids[0]]
    return {"throttle_time": 0, "error_code": code_of(top), "members": [
        {"member_id": m, "group_instance_id": None, "error_code": code_of(code)} for m, code in left.items()]}


async def offset_commit(server: "Server", conn: "Connection", request: "Request") -> dict:
    body = request.body
    generation = getattr(body, "generation_id_or_member_epoch", getattr(body, "generation_id", -1))

    def answer(codes: dict[tuple[str, int], str] | str) -> dict:
        return {"throttle_time": 0, "topics": [
            {"name": t.name, "partitions": [
                {"partition_index": p.partition_index,
                 "error_code": code_of(codes if isinstance(codes, str) else codes.get((t.name, p.partition_index), "NONE"))}
                for p in t.partitions]} for t in body.topics]}

    refused = await _guard(server, conn, body.group_id)
    if refused:
        return answer(refused)
    codes: dict[tuple[str, int], str] = {}
    offsets, epochs = {}, {}
    for t in body.topics:
        if not server.allowed(conn, "READ", "TOPIC", t.name):
            codes.update({(t.name, p.partition_index): "TOPIC_AUTHORIZATION_FAILED" for p in t.partitions})
            continue
        known = await existing_partitions(server, t.name)
        kept = [p for p in t.partitions if known is None or p.partition_index in known]
        codes.update({(t.name, p.partition_index): "UNKNOWN_TOPIC_OR_PARTITION" for p in t.partitions
                      if known is not None and p.partition_index not in known})
        offsets.update({(t.name, p.partition_index): p.committed_offset for p in kept})
        # KIP-320: the epoch of the last record consumed, which the client validates its position with
        epochs.update({(t.name, p.partition_index): p.committed_leader_epoch for p in kept
                       if getattr(p, "committed_leader_epoch", -1) >= 0})
    consumer = body.group_id in server.consumer_groups.groups  # a KIP-848 group: the generation is a member epoch
    try:
        await (server.consumer_groups if consumer else server.coordinator).commit(
            body.group_id, body.member_id, generation, offsets, epochs)
    except (GroupError, ConsumerGroupError) as exc:
        return answer(exc.code)
    except LostGroupError:
        server.coordinator.drop(body.group_id)
        server.consumer_groups.drop(body.group_id)
        return answer("NOT_COORDINATOR")
    except LakelogError as exc:
        return answer({k: _name(exc) for k in offsets} | codes)
    if generation < 0 and not body.member_id:  # set from outside the group (AlterConsumerGroupOffsets)
        server.gates.forget(body.group_id)
    return answer(codes)


def _name(exc: Exception) -> str:
    from serve.errors import name_of

    return name_of(exc)


async def offset_fetch(server: "Server", conn: "Connection", request: "Request") -> dict:
    body = request.body
    refused = await _guard(server, conn, body.group_id, "DESCRIBE")
    if refused:
        return {"throttle_time": 0, "error_code": code_of(refused), "topics": []}
    committed = await server.records.run(server.records.committed, body.group_id)
    if body.topics is None:
        wanted = await server.ctx.run(_existing, server, {tp for tp in committed})
    else:
        wanted = {t.name: list(t.partition_indexes) for t in body.topics}
    hidden = [t for t in wanted if not server.allowed(conn, "DESCRIBE", "TOPIC", t)]
    topics = [{"name": t, "partitions": [
        {"partition_index": p, "committed_offset": committed.get((t, p), (-1, -1))[0],
         "committed_leader_epoch": committed.get((t, p), (-1, -1))[1], "metadata": "", "error_code": 0}
        for p in sorted(ps)]}
        for t, ps in sorted(wanted.items()) if t not in hidden]
    if body.topics is not None:  # as Kafka: a topic asked for by name is refused, not left out (all topics: left out)
        topics += [{"name": t, "partitions": [
            {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
             "error_code": code_of("TOPIC_AUTHORIZATION_FAILED")} for p in wanted[t]]} for t in hidden]
    return {"throttle_time": 0, "error_code": 0, "topics": topics}


def _existing(server: "Server", partitions: set[tuple[str, int]]) -> dict[str, list[int]]:
    """Of a group's committed ``partitions``, those its topics still have, by topic: a retired
    partition's or a deleted topic's offsets stay in lakelog's tables (its audit and `groups
    describe` read them), but are not listed to Kafka's clients, as Kafka drops the offsets of
    partitions it deletes (a client would look for the partition and find none)."""
    out: dict[str, list[int]] = {}
    for topic in sorted({t for t, _p in partitions}):
        try:
            readable = set(server.ctx.view(topic, max_age=1.0).snapshot.readable())
        except (UnknownTopicError, StorageError):
            continue
        found = sorted(p for t, p in partitions if t == topic and p in readable)
        if found:
            out[topic] = found
    return out


async def list_groups(server: "Server", conn: "Connection", request: "Request") -> dict:
    known = await server.records.run(server.records.known_groups)
    states = {name: g.state for name, g in server.coordinator.groups.items()}
    states.update({name: g.image.state() for name, g in server.consumer_groups.groups.items()
                   if g.image.members or name not in states})
    wanted = set(getattr(request.body, "states_filter", ()) or ())
    groups = []
    for name in sorted(set(known) | set(states)):
        state = states.get(name, "Empty")
        if (wanted and state not in wanted) or not server.allowed(conn, "DESCRIBE", "GROUP", name):
            continue
        groups.append({"group_id": name, "protocol_type": "consumer", "group_state": state})
    return {"throttle_time": 0, "error_code": 0, "groups": groups}


async def describe_groups(server: "Server", conn: "Connection", request: "Request") -> dict:
    out = []
    for name in request.body.groups:
        base = {"group_id": name, "group_state": "Dead", "protocol_type": "", "protocol_data": "", "members": [],
                "authorized_operations": -2147483648, "error_code": 0, "error_message": None}
        refused = await _guard(server, conn, name, "DESCRIBE")
        if refused:
            out.append({**base, "error_code": code_of(refused)})
            continue
        if name in server.consumer_groups.groups:  # KIP-848's, with members or not: ConsumerGroupDescribe describes it
            out.append(_not_found(base, f"Group {name} is not a classic group.", request.version))
            continue
        group = server.coordinator.groups.get(name)
        if group is None or not group.members:
            if name not in await server.records.run(server.records.known_groups):
                out.append(_not_found(base, f"Group {name} not found.", request.version))
            else:
                out.append({**base, "group_state": "Empty", "protocol_type": "consumer"})
            continue
        out.append({**base, "group_state": group.state, "protocol_type": group.protocol_type or "",
                    "protocol_data": group.protocol or "", "members": [
                        {"member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": m.client_id,
                         "client_host": "/" + m.client_host, "member_metadata": m.metadata(group.protocol or ""),
                         "member_assignment": m.assignment if group.state == STABLE else b""}
                        for m in group.members.values()]})
    return {"throttle_time": 0, "groups": out}


def _not_found(base: dict, message: str, version: int) -> dict:
    """Kafka 4's answer for a group DescribeGroups does not describe (none, or not a classic group):
    GROUP_ID_NOT_FOUND with a message from version 6 (KIP-1043), a Dead group without an error before."""
    return {**base, "error_code": code_of("GROUP_ID_NOT_FOUND"), "error_message": message} if version >= 6 else base


def _delete_group(server: "Server", name: str) -> str:
    from control_plane.group.admin import GroupAdmin

    try:
        GroupAdmin(server.ctx.spark, server.ctx.root).delete(name)
        return "NONE"
    except LakelogError as exc:
        return "NON_EMPTY_GROUP" if "live" in str(exc) or "member" in str(exc) else _name(exc)


async def delete_groups(server: "Server", conn: "Connection", request: "Request") -> dict:
    out = []
    for name in request.body.groups_names:
        refused = await _guard(server, conn, name, "DELETE")
        group = server.coordinator.groups.get(name)
        if refused:
            code = refused
        elif (group is not None and group.members) or server.consumer_groups.live(name):
            code = "NON_EMPTY_GROUP"
        else:
            code = await server.ctx.run(_delete_group, server, name)
            if code == "NONE":
                server.consumer_groups.drop(name)  # a KIP-848 group starts over, above the fence deletion left
                server.coordinator.drop(name)  # so is a classic one, and ListGroups no longer lists it
                server.gates.forget(name)  # a group started again with the name passes the resizes anew
        out.append({"group_id": name, "error_code": code_of(code)})
    return {"throttle_time": 0, "results": out}


HANDLERS = {
    10: (0, 4, find_coordinator),
    11: (0, 7, join_group),
    14: (0, 5, sync_group),
    12: (0, 4, heartbeat),
    13: (0, 4, leave_group),
    8: (2, 9, offset_commit),
    9: (1, 7, offset_fetch),
    16: (0, 4, list_groups),
    15: (0, 6, describe_groups),
    42: (0, 2, delete_groups),
}
