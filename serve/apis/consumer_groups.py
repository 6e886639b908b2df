"""KIP-848's consumer group requests (ConsumerGroupHeartbeat, ConsumerGroupDescribe), answered by
``serve.consumer_groups.ConsumerGroups``: the server computes the assignment; offsets are lakelog's
group tables, committed with OffsetCommit as a classic group's are (``serve.apis.groups``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from serve.apis.groups import _guard, _ms
from serve.consumer_groups import owned_partitions, topic_partitions
from serve.consumer_rules import Beat, ConsumerGroupError
from serve.errors import code_of
from serve.group_tables import LostGroupError

if TYPE_CHECKING:
    from serve.server import Connection, Server
    from serve.wire import Request


def _refused(code: str, message: str | None = None) -> dict:
    return {"throttle_time": 0, "error_code": code_of(code), "error_message": message, "member_id": None,
            "member_epoch": 0, "heartbeat_interval": 0, "assignment": None}


async def consumer_group_heartbeat(server: "Server", conn: "Connection", request: "Request") -> dict:
    body = request.body
    refused = await _guard(server, conn, body.group_id)
    if refused:
        return _refused(refused)
    topics = None if body.subscribed_topic_names is None else tuple(body.subscribed_topic_names)
    if topics and not all(server.allowed(conn, "DESCRIBE", "TOPIC", t) for t in topics):
        return _refused("TOPIC_AUTHORIZATION_FAILED")
    if server.coordinator.groups.get(body.group_id) is not None and server.coordinator.groups[body.group_id].members:
        return _refused("GROUP_ID_NOT_FOUND", f"Group {body.group_id} is not a consumer group: its members use the "
                                              "classic protocol (group.protocol=classic)")
    groups = server.consumer_groups
    beat = Beat(member_id=body.member_id, epoch=body.member_epoch, instance_id=body.instance_id, rack_id=body.rack_id,
                rebalance_timeout_ms=_ms(body.rebalance_timeout), topics=topics,
                regex=getattr(body, "subscribed_topic_regex", None), assignor=body.server_assignor,
                owned=owned_partitions(groups.groups.get(body.group_id), body.topic_partitions),
                client_id=request.client_id or "", host=conn.peer.rsplit(":", 1)[0])
    try:
        answer, ids = await groups.heartbeat(body.group_id, beat)
    except ConsumerGroupError as exc:
        return _refused(exc.code, exc.message)
    except LostGroupError:
        groups.drop(body.group_id)
        return _refused("NOT_COORDINATOR")
    assignment = None if answer.assignment is None else {"topic_partitions": topic_partitions(ids, answer.assignment)}
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "member_id": answer.member_id,
            "member_epoch": answer.epoch, "heartbeat_interval": server.settings.consumer_heartbeat_interval_ms,
            "assignment": assignment}


async def consumer_group_describe(server: "Server", conn: "Connection", request: "Request") -> dict:
    out = []
    for name in request.body.group_ids:
        base = {"group_id": name, "error_message": None, "group_state": "Dead", "group_epoch": -1, "assignment_epoch": -1,
                "assignor_name": "", "members": [], "authorized_operations": -2147483648}
        refused = await _guard(server, conn, name, "DESCRIBE")
        described = None if refused else server.consumer_groups.describe(name)
        if refused:
            out.append({**base, "error_code": code_of(refused)})
        elif described is None:  # a classic group, or none: Kafka's admin client asks DescribeGroups next
            out.append({**base, "error_code": code_of("GROUP_ID_NOT_FOUND"),
                        "error_message": f"Group {name} is not a consumer group."})
        else:
            out.append({**base, **described})
    return {"throttle_time": 0, "groups": out}


HANDLERS = {
    68: (0, 1, consumer_group_heartbeat),
    69: (0, 1, consumer_group_describe),
}
