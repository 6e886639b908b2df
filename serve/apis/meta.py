"""ApiVersions, Metadata and DescribeCluster: what the server serves, which servers there are, and
each topic's partitions with their leaders and leader epochs."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from log_store.errors import InvalidConfigurationError, LakelogError, TopicExistsError
from log_store.log_metadata import Mode
from log_store.names import check_topic_name
from serve.cluster import cluster_id, leader_of
from serve.errors import code_of, name_of

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
    brokers = server.brokers()
    reader = bool(server.groups_reading(request.client_id or "", conn.peer.rsplit(":", 1)[0]))
    topics = await server.ctx.run(_topics, server, conn, request, brokers, reader)
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


def _topics(server: "Server", conn: "Connection", request: "Request", brokers, reader: bool) -> list[dict]:
    """Metadata's topics, on the pool (a request may name a hundred thousand), as Kafka's broker
    answers them (KafkaApis.handleTopicMetadataRequest): each name once; one the caller may not
    describe is TOPIC_AUTHORIZATION_FAILED (left out of a request for every topic); one that does
    not exist is TOPIC_AUTHORIZATION_FAILED if it would be auto-created and the caller may not
    create it, INVALID_TOPIC_EXCEPTION if its name is not a topic name, and else made (with
    ``serve.auto_create_topics`` and the request's allow_auto_topic_creation) or
    UNKNOWN_TOPIC_OR_PARTITION."""
    body = request.body
    every = body.topics is None or (request.version == 0 and not body.topics)  # v0: an empty list means all
    names = None
    if not every:
        ids = {}  # v12 may name a topic by its id alone
        if any(t.name is None for t in body.topics):
            ids = {view.topic_id: name for name, view in server.ctx.views(None)[0].items()}
        names = list(dict.fromkeys(t.name if t.name is not None else ids.get(str(t.topic_id), t.topic_id or uuid.UUID(int=0))
                                   for t in body.topics))
    create = (not every and getattr(body, "allow_auto_topic_creation", True) and server.settings.auto_create_topics)
    out = []
    if names is not None:
        for name in names:
            if isinstance(name, uuid.UUID):  # a topic id no live topic has
                out.append(_absent(None, "UNKNOWN_TOPIC_ID", topic_id=name))
            elif not server.allowed(conn, "DESCRIBE", "TOPIC", name):
                out.append(_absent(name, "TOPIC_AUTHORIZATION_FAILED"))
        names = [n for n in names if isinstance(n, str) and server.allowed(conn, "DESCRIBE", "TOPIC", n)]
    views, missing, offline = server.ctx.views(names)
    for name in missing:
        code = "UNKNOWN_TOPIC_OR_PARTITION"
        if create and not server.allowed(conn, "CREATE", "TOPIC", name):
            code = "TOPIC_AUTHORIZATION_FAILED"
        elif not _legal(name):
            code = "INVALID_TOPIC_EXCEPTION"
        elif create:
            code = _create(server, name)
            if code == "NONE":
                views.update(server.ctx.views([name])[0])
                continue
        out.append(_absent(name, code))
    for name, found in sorted({**offline, **views}.items()):
        if every and not server.allowed(conn, "DESCRIBE", "TOPIC", name):
            continue
        if name in offline:
            out.append(_offline(*found, reader))
        else:
            out.append({"error_code": 0, "name": name, "topic_id": found.topic_id, "is_internal": False,
                        "partitions": partitions_of(server, found, brokers, reader)})
    return out


def _absent(name: str | None, code: str, topic_id=None) -> dict:
    return {"error_code": code_of(code), "name": name, "topic_id": topic_id, "is_internal": False, "partitions": []}


def _legal(name: str) -> bool:
    try:
        check_topic_name(name)
        return True
    except InvalidConfigurationError:
        return False


def _create(server: "Server", name: str) -> str:
    """Auto-create ``name``: "NONE" once it exists (made here or by another at the same time), else the error's code name."""
    try:
        server.ctx.admin.create(name, server.settings.default_partitions)
    except TopicExistsError:
        pass
    except LakelogError as exc:
        return name_of(exc)
    return "NONE"


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
