"""Topic administration as Kafka's admin clients ask for it (``kafka-topics.sh``,
``kafka-configs.sh``, ``kafka-delete-records.sh``): each request is lakelog's own operation
(``TopicAdmin.create``, ``TopicController.alter``, ``delete``, ``alter_config``,
``delete_records``), so the same rules and records hold as for ``lakelog topics``."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from control_plane.controller import TopicController
from control_plane.topic_config import KEYS, PLACEMENT, WORDS, TopicConfig, check, parse_pairs
from log_store.errors import (
    InvalidConfigurationError, InvalidPartitionsError, LakelogError, OffsetCheckError, UnknownTopicError,
)
from log_store.names import check_topic_name
from serve.errors import code_of, message_of
from serve.settings import ServeSettings

if TYPE_CHECKING:
    from serve.server import Connection, Server
    from serve.wire import Request

TOPIC, BROKER = 2, 4  # Kafka's config resource types
TOPIC_SET, SERVER_SET, DEFAULT = 1, 4, 5  # Kafka's config sources (dynamic topic, static broker, default)
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations
DEFAULTS = TopicConfig().as_kafka()
log = logging.getLogger("lakelog.serve")


def controller(server: "Server") -> TopicController:
    return TopicController(server.ctx.spark, server.ctx.root, server.controller_settings)


def _result(name: str, exc: Exception | None = None, **more) -> dict:
    return {"name": name, "error_code": code_of(exc) if exc else 0, "error_message": message_of(exc) if exc else None,
            **more}


# Kafka's own topic configs that lakelog does not keep (its log has no segments, indexes or
# flushes, and replication is lakelog's; segment.ms: its segments are files, closed by each write): taken at creation and not kept, as clients such as Kafka
# Connect send some of them with every topic they create. Any other name is refused, as Kafka does.
KAFKA_TOPIC_CONFIGS = frozenset({
    "compression.type", "compression.gzip.level", "compression.lz4.level", "compression.zstd.level",
    "file.delete.delay.ms", "flush.messages", "flush.ms",
    "follower.replication.throttled.replicas", "index.interval.bytes", "leader.replication.throttled.replicas",
    "local.retention.bytes", "local.retention.ms",
    "message.downconversion.enable", "message.format.version", "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms", "message.timestamp.difference.max.ms", "min.insync.replicas", "preallocate",
    "remote.storage.enable",
    "remote.log.copy.disable", "remote.log.delete.on.disable", "segment.index.bytes", "segment.jitter.ms",
    "segment.ms", "unclean.leader.election.enable",
})


def _sourced(server: "Server", config: dict[str, str]) -> list[tuple[str, str, int]]:
    """A topic's configs, each with its value and Kafka's config source: a topic that sets no
    ``lakelog.placement`` has its server's ``serve.placement``."""
    out = {k: (v, DEFAULT if v == DEFAULTS.get(k) else TOPIC_SET) for k, v in config.items()}
    if PLACEMENT not in out:
        mine = server.settings.placement
        out[PLACEMENT] = (mine, DEFAULT if mine == ServeSettings.model_fields["placement"].default else SERVER_SET)
    return [(k, v, source) for k, (v, source) in sorted(out.items())]


def _check_configs(configs) -> list[str]:
    """The configs of a CreateTopics lakelog keeps, as ``key=value`` pairs; Kafka's others are taken
    and not kept, an unknown name is INVALID_CONFIG (nothing is created)."""
    pairs = []
    for c in configs:
        if c.value is None:
            continue
        if c.name in KEYS or c.name in WORDS:
            check(c.name, c.value)
            pairs.append(f"{c.name}={c.value}")
        elif c.name not in KAFKA_TOPIC_CONFIGS:
            raise InvalidConfigurationError(
                f"unknown topic config {c.name!r}: lakelog keeps {', '.join(sorted([*KEYS, *WORDS]))}"
                " and takes Kafka's other topic configs without keeping them")
    parse_pairs(pairs)  # the rules across keys (min.compaction.lag.ms at most max.compaction.lag.ms)
    return pairs


def _create_one(server: "Server", topic, validate_only: bool) -> dict:
    name = topic.name
    try:
        check_topic_name(name)
    except InvalidConfigurationError as exc:  # Kafka's answer to a name it cannot take
        return {**_result(name, topic_id=None, configs=[]), "error_code": code_of("INVALID_TOPIC_EXCEPTION"),
                "error_message": str(exc)}
    try:
        if not topic.assignments and (topic.num_partitions == 0 or topic.num_partitions < -1):  # -1: the default
            raise InvalidPartitionsError(f"topic '{name}': {topic.num_partitions} partitions; give 1 or more "
                                         "(or -1 for the server's serve.default_partitions)")
        count = topic.num_partitions if topic.num_partitions > 0 else server.settings.default_partitions
        if topic.assignments:
            count = len(topic.assignments)
        pairs = _check_configs(topic.configs)
        if validate_only:
            if name in server.ctx.topics():
                from log_store.errors import TopicExistsError

                raise TopicExistsError(f"topic '{name}' already exists")
            return _result(name, num_partitions=count, replication_factor=1, topic_id=None, configs=[])
        record = server.ctx.admin.create(name, count)
        server.ctx.forget_topic(name)  # known here at once
        if pairs:
            controller(server).alter_config(name, pairs)
        view = server.ctx.view(name)
        config = server.ctx.admin.describe(name).config
        return _result(name, num_partitions=record.undeleted_partition_count, replication_factor=1,
                       topic_id=view.topic_id, configs=[
                           {"name": k, "value": v, "read_only": False, "config_source": source, "is_sensitive": False}
                           for k, v, source in _sourced(server, config)])
    except LakelogError as exc:
        return _result(name, exc, topic_id=None, configs=[])


async def create_topics(server: "Server", conn: "Connection", request: "Request") -> dict:
    out = []
    for t in request.body.topics:
        if not server.allowed(conn, "CREATE", "TOPIC", t.name):
            out.append({"name": t.name, "error_code": code_of("TOPIC_AUTHORIZATION_FAILED"), "error_message": None,
                        "topic_id": None, "configs": []})
            continue
        out.append(await server.ctx.run(_create_one, server, t, request.body.validate_only))
    return {"throttle_time": 0, "topics": out}


def _delete_one(server: "Server", name: str) -> dict:
    try:
        server.ctx.admin.get(name)
        controller(server).delete(name)
        server.ctx.forget_topic(name)
        return _result(name)
    except LakelogError as exc:
        return _result(name, exc)


async def delete_topics(server: "Server", conn: "Connection", request: "Request") -> dict:
    body = request.body
    names = list(body.topic_names) if getattr(body, "topic_names", None) else [t.name for t in getattr(body, "topics", ())]
    out = []
    for name in names:
        if not server.allowed(conn, "DELETE", "TOPIC", name):
            out.append({"name": name, "error_code": code_of("TOPIC_AUTHORIZATION_FAILED")})
            continue
        out.append(await server.ctx.run(_delete_one, server, name))
    return {"throttle_time": 0, "responses": out}


def _grow_one(server: "Server", topic, validate_only: bool) -> dict:
    try:
        current = server.ctx.admin.get(topic.name).undeleted_partition_count
        if topic.count == current:
            raise InvalidPartitionsError(f"topic '{topic.name}' already has {current} partitions")
        if topic.count < current:  # Kafka's CreatePartitions only adds partitions; shrinking is lakelog's own
            raise InvalidPartitionsError(f"topic '{topic.name}' has {current} partitions; CreatePartitions only "
                                         f"grows (to shrink: lakelog topics alter --partitions {topic.count})")
        if not validate_only:
            controller(server).alter(topic.name, topic.count)
        return _result(topic.name)
    except LakelogError as exc:
        return _result(topic.name, exc)


async def create_partitions(server: "Server", conn: "Connection", request: "Request") -> dict:
    out = []
    for t in request.body.topics:
        if not server.allowed(conn, "ALTER", "TOPIC", t.name):
            out.append({"name": t.name, "error_code": code_of("TOPIC_AUTHORIZATION_FAILED")})
            continue
        out.append(await server.ctx.run(_grow_one, server, t, request.body.validate_only))
    return {"throttle_time": 0, "results": out}


def _describe_one(server: "Server", resource) -> dict:
    base = {"resource_type": resource.resource_type, "resource_name": resource.resource_name}
    if resource.resource_type == BROKER:
        return {**base, "error_code": 0, "error_message": None, "configs": []}
    if resource.resource_type != TOPIC:
        return {**base, "error_code": code_of("INVALID_REQUEST"), "error_message": "only topics and brokers",
                "configs": []}
    try:
        config = server.ctx.admin.describe(resource.resource_name).config
    except LakelogError as exc:
        return {**base, "error_code": code_of(exc), "error_message": str(exc), "configs": []}
    keys = resource.configuration_keys
    configs = [{"name": k, "value": v, "read_only": False, "is_default": source == DEFAULT,
                "config_source": source, "is_sensitive": False, "synonyms": [], "config_type": 0, "documentation": None}
               for k, v, source in _sourced(server, config) if keys is None or k in keys]
    return {**base, "error_code": 0, "error_message": None, "configs": configs}


async def describe_configs(server: "Server", conn: "Connection", request: "Request") -> dict:
    out = []
    for r in request.body.resources:
        if r.resource_type == TOPIC and not server.allowed(conn, "DESCRIBE_CONFIGS", "TOPIC", r.resource_name):
            out.append({"resource_type": r.resource_type, "resource_name": r.resource_name, "configs": [],
                        "error_code": code_of("TOPIC_AUTHORIZATION_FAILED"), "error_message": None})
            continue
        out.append(await server.ctx.run(_describe_one, server, r))
    return {"throttle_time": 0, "results": out}


def _check_names(configs) -> None:
    """An alter names only configs lakelog keeps (Kafka's others are refused: they would not be kept)."""
    unknown = [c.name for c in configs if c.name not in KEYS and c.name not in WORDS]
    if unknown:
        raise InvalidConfigurationError(f"unknown or unsupported topic config {unknown[0]}; lakelog keeps "
                                        f"{', '.join(sorted([*KEYS, *WORDS]))}")


def _change(server: "Server", name: str, pairs: list[str], deletes: list[str], validate_only: bool,
            replace: bool = False) -> None:
    """``topics alter --config``'s change (``TopicController.alter_config``); validate_only: the
    topic must exist, nothing is changed."""
    if validate_only:
        server.ctx.admin.get(name)
    else:
        controller(server).alter_config(name, pairs, deletes, replace=replace)


def _alter_one(server: "Server", resource, validate_only: bool) -> dict:
    base = {"resource_type": resource.resource_type, "resource_name": resource.resource_name}
    try:
        if resource.resource_type != TOPIC:
            raise InvalidConfigurationError("only topic configs can be altered through lakelog serve")
        sets = [c for c in resource.configs if c.config_operation == SET]
        deletes = [c.name for c in resource.configs if c.config_operation == DELETE]
        if len(sets) + len(deletes) != len(resource.configs):
            raise InvalidConfigurationError("only SET and DELETE are supported (not APPEND or SUBTRACT)")
        _check_names(resource.configs)
        _change(server, resource.resource_name, _check_configs(sets), deletes, validate_only)
        return {**base, "error_code": 0, "error_message": None}
    except LakelogError as exc:
        return {**base, "error_code": code_of(exc), "error_message": str(exc)}


def _refused(resource, code: str) -> dict:
    return {"resource_type": resource.resource_type, "resource_name": resource.resource_name,
            "error_code": code_of(code), "error_message": None}


def _authorized(server: "Server", conn: "Connection", resource) -> bool:
    """Kafka's ACL for altering configs: ALTER_CONFIGS on the topic, or on the cluster for a broker."""
    if resource.resource_type == BROKER:
        return server.allowed(conn, "ALTER_CONFIGS", "CLUSTER", "kafka-cluster")
    return server.allowed(conn, "ALTER_CONFIGS", "TOPIC", resource.resource_name)


def _denied(resource) -> dict:
    return _refused(resource, "CLUSTER_AUTHORIZATION_FAILED" if resource.resource_type == BROKER
                    else "TOPIC_AUTHORIZATION_FAILED")


async def incremental_alter_configs(server: "Server", conn: "Connection", request: "Request") -> dict:
    out = []
    for r in request.body.resources:
        if not _authorized(server, conn, r):
            out.append(_denied(r))
            continue
        out.append(await server.ctx.run(_alter_one, server, r, request.body.validate_only))
    return {"throttle_time": 0, "responses": out}


def _replace_one(server: "Server", resource, validate_only: bool) -> dict:
    """Kafka's legacy AlterConfigs of one resource: its configs become the whole set of a topic's
    configs (every other back to its default). Kafka's INVALID_REQUEST for what its broker refuses
    before looking at a topic (a null value, a key twice, a broker config it cannot set now)."""
    base = {"resource_type": resource.resource_type, "resource_name": resource.resource_name}

    def invalid(message: str) -> dict:
        return {**base, "error_code": code_of("INVALID_REQUEST"), "error_message": message}

    names = [c.name for c in resource.configs]
    if len(set(names)) != len(names):
        return invalid("Error due to duplicate config keys")
    nulls = [c.name for c in resource.configs if c.value is None]
    if nulls:
        return invalid(f"Null value not supported for : {', '.join(nulls)}")
    if resource.resource_type == BROKER:
        if resource.resource_name and resource.resource_name != str(server.ctx.node_id):
            return invalid(f"Unexpected broker id, expected {server.ctx.node_id}, but received "
                           f"{resource.resource_name}")
        if names:  # Kafka's answer for broker configs it cannot update dynamically
            return invalid(f"Cannot update these configs dynamically: {sorted(names)}: lakelog serve keeps no "
                           "dynamic broker configs (set them in its settings: docs/configuration.md)")
        return {**base, "error_code": 0, "error_message": None}
    if resource.resource_type != TOPIC:
        return invalid(f"Unknown resource type {resource.resource_type}")
    try:
        _check_names(resource.configs)
        _change(server, resource.resource_name, _check_configs(resource.configs), [], validate_only, replace=True)
        return {**base, "error_code": 0, "error_message": None}
    except LakelogError as exc:
        return {**base, "error_code": code_of(exc), "error_message": str(exc)}


async def alter_configs(server: "Server", conn: "Connection", request: "Request") -> dict:
    """Kafka's legacy AlterConfigs (API 33): a resource named twice is INVALID_REQUEST, as Kafka's."""
    seen = [(r.resource_type, r.resource_name) for r in request.body.resources]
    out = []
    for r in request.body.resources:
        if seen.count((r.resource_type, r.resource_name)) > 1:
            out.append({**_refused(r, "INVALID_REQUEST"), "error_message": "Each resource must appear at most once."})
        elif not _authorized(server, conn, r):
            out.append(_denied(r))
        else:
            out.append(await server.ctx.run(_replace_one, server, r, request.body.validate_only))
    return {"throttle_time": 0, "responses": out}


def _delete_records_one(server: "Server", topic) -> dict:
    try:
        view = server.ctx.view(topic.name)
        ends = server.ctx.high_watermarks(view)
        wanted = {p.partition_index: ends.get(p.partition_index, 0) if p.offset == -1 else p.offset for p in topic.partitions}
        unknown = [p for p in wanted if p not in view.snapshot.metadata.partitions]
        changes = {c.partition: c.log_start for c in controller(server).delete_records(
            topic.name, {p: o for p, o in wanted.items() if p not in unknown})}
        view = server.ctx.view(topic.name)
        return {"name": topic.name, "partitions": [
            {"partition_index": p, "error_code": code_of("UNKNOWN_TOPIC_OR_PARTITION") if p in unknown else 0,
             "low_watermark": -1 if p in unknown else changes.get(p, view.snapshot.first_offset(p))} for p in wanted]}
    except LakelogError as exc:
        log.warning("delete-records of %s refused: %s", topic.name, exc)
        code = code_of("OFFSET_OUT_OF_RANGE") if isinstance(exc, OffsetCheckError) else code_of(exc)
        return {"name": topic.name, "partitions": [{"partition_index": p.partition_index, "error_code": code,
                                                    "low_watermark": -1} for p in topic.partitions]}


async def delete_records(server: "Server", conn: "Connection", request: "Request") -> dict:
    out = []
    for t in request.body.topics:
        if not server.allowed(conn, "DELETE", "TOPIC", t.name):
            out.append({"name": t.name, "partitions": [{"partition_index": p.partition_index, "low_watermark": -1,
                                                        "error_code": code_of("TOPIC_AUTHORIZATION_FAILED")}
                                                       for p in t.partitions]})
            continue
        out.append(await server.ctx.run(_delete_records_one, server, t))
    return {"throttle_time": 0, "topics": out}


HANDLERS = {
    19: (2, 7, create_topics),
    20: (1, 5, delete_topics),
    37: (0, 3, create_partitions),
    32: (1, 4, describe_configs),
    44: (0, 1, incremental_alter_configs),
    33: (0, 2, alter_configs),
    21: (0, 2, delete_records),
}
_ = UnknownTopicError  # answered through code_of
