"""ApiVersions, Metadata and DescribeCluster: what the server serves, which servers there are, and
each topic's partitions with their leaders and leader epochs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from log_store.errors import LakelogError
from log_store.log_metadata import Mode
from serve.cluster import cluster_id, leader_of
from serve.errors import code_of

if TYPE_CHECKING:
    from serve.server import Connection, Server
    from serve.wire import Request


def api_versions_body(server: "Server", error: str = "NONE") -> dict:
    return {
        "error_code": code_of(error),
        "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(server.versions.items())],
        "throttle_time": 0,
    }


async def api_versions(server: "Server", conn: "Connection", request: "Request") -> dict:
    return api_versions_body(server)


def partitions_of(server: "Server", view, brokers, reader: bool = False) -> list[dict]:
    """A topic's partitions as Metadata lists them, each with a leader and lakelog's leader epoch:
    the ones producers write (ReadWrite, below the undeleted count), and for a ``reader`` (a client
    in a consumer group here) also those a shrink marked, which its group drains before the
    shrink's gate opens."""
    meta = view.snapshot.metadata
    out = []
    for p in sorted(view.snapshot.readable()) if reader else view.writable():
        leader = leader_of(brokers, view.name, p)
        out.append({"error_code": 0, "partition_index": p, "leader_id": leader,
                    "leader_epoch": meta.partitions[p].leader_epoch, "replica_nodes": [leader], "isr_nodes": [leader],
                    "offline_replicas": []})
    return out


async def metadata(server: "Server", conn: "Connection", request: "Request") -> dict:
    body = request.body
    names = None if body.topics is None else [t.name for t in body.topics]
    if request.version == 0 and not names:
        names = None  # v0: an empty list means every topic
    allow_create = getattr(body, "allow_auto_topic_creation", True) and server.settings.auto_create_topics
    brokers = server.brokers()
    reader = bool(server.groups_reading(request.client_id or "", conn.peer.rsplit(":", 1)[0]))
    views, missing, offline = await server.ctx.run(server.ctx.views, names)
    topics = []
    for name in missing:
        code = "UNKNOWN_TOPIC_OR_PARTITION"
        if allow_create:
            code = await server.ctx.run(_create, server, name)
            if code == "NONE":
                found, _, _ = await server.ctx.run(server.ctx.views, [name])
                views.update(found)
                continue
        if not server.allowed(conn, "DESCRIBE", "TOPIC", name):
            code = "TOPIC_AUTHORIZATION_FAILED"
        topics.append({"error_code": code_of(code), "name": name, "topic_id": None, "is_internal": False, "partitions": []})
    for name, found in sorted({**offline, **views}.items()):
        if not server.allowed(conn, "DESCRIBE", "TOPIC", name):
            if names is None:
                continue
            topics.append({"error_code": code_of("TOPIC_AUTHORIZATION_FAILED"), "name": name, "topic_id": None,
                           "is_internal": False, "partitions": []})
        elif name in offline:
            topics.append(_offline(*found, reader))
        else:
            topics.append({"error_code": 0, "name": name, "topic_id": found.topic_id, "is_internal": False,
                           "partitions": partitions_of(server, found, brokers, reader)})
    return {"throttle_time": 0, "brokers": [b.__dict__ for b in brokers], "cluster_id": cluster_id(server.ctx.root),
            "controller_id": min(b.node_id for b in brokers), "topics": topics}


def _offline(record, topic_id: str | None, reader: bool) -> dict:
    """A live topic whose log cannot be reached now (its root lost), as Kafka's broker lists a topic
    whose partitions have no leader: each partition LEADER_NOT_AVAILABLE with leader -1, which
    clients wait out (a producer holds its records until a leader shows, up to delivery.timeout.ms)."""
    listed = [p for p in sorted(record.partitions, key=lambda p: p.partition)
              if p.mode is Mode.READ_WRITE and p.partition < record.undeleted_partition_count
              or reader and p.mode is Mode.READ_ONLY]
    return {"error_code": 0, "name": record.topic, "topic_id": topic_id, "is_internal": False, "partitions": [
        {"error_code": code_of("LEADER_NOT_AVAILABLE"), "partition_index": p.partition, "leader_id": -1,
         "leader_epoch": p.leader_epoch, "replica_nodes": [], "isr_nodes": [], "offline_replicas": []}
        for p in listed]}


def _create(server: "Server", name: str) -> str:
    try:
        server.ctx.admin.create(name, server.settings.default_partitions)
        return "NONE"
    except LakelogError as exc:
        return code_of(exc)


async def describe_cluster(server: "Server", conn: "Connection", request: "Request") -> dict:
    brokers = server.brokers()
    return {"throttle_time": 0, "error_code": 0, "error_message": None, "endpoint_type": 1,
            "cluster_id": cluster_id(server.ctx.root), "controller_id": min(b.node_id for b in brokers),
            "brokers": [{"broker_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack} for b in brokers],
            "cluster_authorized_operations": -2147483648}


HANDLERS = {
    18: (0, 3, api_versions),
    3: (0, 12, metadata),
    60: (0, 1, describe_cluster),
}
