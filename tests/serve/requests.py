"""Plausible requests of any API at any version, from plain values (``plausible``): each field a
Kafka client would fill is filled as one would (a real topic and group, partition 0, a valid record
batch, a consumer's subscription, "no producer id", "latest"), every array with one element, every
other required field with an empty value of its type. For tests that send every API at every
version a server advertises, and for the parser's own tests."""

from __future__ import annotations

import struct
from dataclasses import MISSING, fields

from kio.index import load_request_schema
from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field, is_optional

from tests.serve.raw import batch

TOPIC_FIELDS = {"topic", "topic_name", "resource_name", "subscribed_topic_names"}
GROUP_FIELDS = {"group_id", "key", "group_ids", "groups", "groups_names", "coordinator_keys"}
NUMBERS = {
    "replica_id": -1, "producer_id": -1, "producer_epoch": -1, "current_leader_epoch": -1, "timestamp": -1,
    "session_epoch": -1, "log_start_offset": -1, "generation_id": -1, "generation_id_or_member_epoch": -1,
    "member_epoch": 0, "leader_epoch": 0, "acks": 1, "timeout": 10_000, "timeout_ms": 10_000,
    "session_timeout": 10_000, "rebalance_timeout": 10_000, "transaction_timeout": 60_000, "max_wait": 0,
    "min_bytes": 1, "max_bytes": 1 << 20, "partition_max_bytes": 1 << 20, "count": 2, "num_partitions": 1,
    "replication_factor": 1, "resource_type": 2, "config_operation": 0, "isolation_level": 0, "key_type": 0,
}
TEXTS = {
    "member_id": "", "group_instance_id": None, "transactional_id": None, "protocol_type": "consumer",
    "protocol_name": "range", "mechanism": "PLAIN", "client_software_name": "raw", "client_software_version": "1",
    "rack_id": None, "server_assignor": None, "subscribed_topic_regex": None, "value": "86400000",
    "reason": None, "cluster_id": None,
}
NONE_YET = {"forgotten_topics_data", "topic_partitions", "assignments"}  # what a client sends empty (or null)


def subscription(topic: str) -> bytes:
    """A consumer's subscription to ``topic`` (ConsumerProtocolSubscription v0), as JoinGroup carries it."""
    name = topic.encode()
    return struct.pack(">hi", 0, 1) + struct.pack(">h", len(name)) + name + struct.pack(">i", -1)


def plausible(api_key: int, version: int, topic: str, group: str) -> dict:
    """Values for ``api_key``'s request at ``version`` (``tests.serve.raw.frame`` builds them)."""
    return _values(load_request_schema(api_key, version), topic, group)


def _values(schema: type, topic: str, group: str) -> dict:
    out = {}
    in_config = "Config" in schema.__name__
    in_topic = "Topic" in schema.__name__ and not in_config
    for f in fields(schema):
        name, kind_name = f.name, f.metadata.get("kafka_type")
        kind = classify_field(f)
        if name in NONE_YET and schema.__name__ != "SyncGroupRequest":
            out[name] = None if is_optional(f) else []
        elif name == "name" and in_config:
            out[name] = "retention.ms"
        elif name == "name" and "Protocol" in schema.__name__:
            out[name] = "range"
        elif name in ("name", "topics") and in_topic and kind_name == "string":
            out[name] = [topic] if isinstance(kind, PrimitiveTupleField) else topic
        elif name in TOPIC_FIELDS or name == "topic_names":
            out[name] = [topic] if isinstance(kind, PrimitiveTupleField) else topic
        elif name in GROUP_FIELDS and kind_name == "string":
            out[name] = [group] if isinstance(kind, PrimitiveTupleField) else group
        elif name in NUMBERS and not isinstance(kind, PrimitiveTupleField | EntityTupleField):
            out[name] = NUMBERS[name]
        elif name in TEXTS:
            out[name] = TEXTS[name]
        elif kind_name == "records":
            out[name] = batch([b"v"])
        elif name == "metadata" and kind_name == "bytes":
            out[name] = subscription(topic)
        elif name == "auth_bytes":
            out[name] = b"\0user\0password"
        elif isinstance(kind, EntityTupleField):
            out[name] = [_values(kind.type_, topic, group)]
        elif isinstance(kind, EntityField):
            out[name] = _values(kind.type_, topic, group)
        elif f.default is not MISSING or f.default_factory is not MISSING:
            continue  # the schema's own default
        elif isinstance(kind, PrimitiveTupleField):
            out[name] = [_empty(kind_name)]
        else:
            out[name] = _empty(kind_name)
    return out


def _empty(kafka_type: str):
    return {"string": "x", "bytes": b"", "bool": False, "uuid": None, "float64": 0.0}.get(kafka_type, 0)
