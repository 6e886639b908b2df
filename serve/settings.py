"""The ``serve`` section of the configuration: listeners, the group commit, limits, liveness."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from log_store.config import Strict
from serve.security import MECHANISMS, Acl

MIB = 1024 * 1024


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[::1]:9092`` for IPv6) as (host, port); ValueError if it is not one."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


class ServeSettings(Strict):
    """How ``lakelog serve`` listens and batches (docs/serve.md, docs/configuration.md)."""

    listen: str = "127.0.0.1:9092"  # HOST:PORT; port 0 picks a free one
    advertised: str | None = None  # HOST:PORT clients are told to connect to (default: the listener's)
    rack: str | None = None  # Kafka's broker.rack, as Metadata lists it
    node_id: int | None = Field(default=None, ge=0)  # Kafka's node.id (default: allocated through the root)
    linger_ms: int = Field(default=20, ge=0)  # a topic's batches gathered this long into one commit
    batch_bytes: int = Field(default=16 * MIB, ge=1024)  # ... or until they hold this many bytes
    max_request_bytes: int = Field(default=100 * MIB, ge=1024)  # Kafka's socket.request.max.bytes
    max_in_flight: int = Field(default=64, ge=1)  # requests of one connection being answered at once
    # What clients may hold (docs/serve.md, "Limits"), by Kafka's names
    sasl_max_receive_bytes: int = Field(default=512 * 1024, ge=1024)  # sasl.server.max.receive.size: before authentication
    queued_max_request_bytes: int = Field(default=256 * MIB, ge=1024)  # queued.max.request.bytes: frames being read
    connections_max_idle_ms: int = Field(default=600_000, ge=100)  # connections.max.idle.ms
    max_connections: int = Field(default=4096, ge=1)  # max.connections
    max_connections_per_ip: int = Field(default=1024, ge=1)  # max.connections.per.ip
    fetch_max_bytes: int = Field(default=57_671_680, ge=1024)  # fetch.max.bytes: a fetch response's records
    fetch_poll_ms: int = Field(default=200, ge=10)  # how often a waiting fetch looks for others' commits
    session_timeout_ms: int = Field(default=10_000, ge=100)  # a server unseen this long is not listed
    heartbeat_interval_ms: int = Field(default=1_000, ge=10)
    threads: int = Field(default=8, ge=1)  # the pool that commits and reads
    tail_bytes: int = Field(default=256 * MIB, ge=0)  # the newest records of its own commits a server keeps (0: none)
    auto_create_topics: bool = False  # Kafka's auto.create.topics.enable
    default_partitions: int = Field(default=1, ge=1)  # Kafka's num.partitions, for auto-created topics
    placement: Literal["key", "client"] = "key"  # where a topic without lakelog.placement has its records placed
    min_insync_replicas: int = Field(default=1, ge=1)  # acks=all on a replicated topic (docs/replication.md)
    group_initial_rebalance_delay_ms: int = Field(default=0, ge=0)  # Kafka's group.initial.rebalance.delay.ms
    group_min_session_timeout_ms: int = Field(default=6_000, ge=1)  # Kafka's group.min.session.timeout.ms
    group_max_session_timeout_ms: int = Field(default=1_800_000, ge=1)  # Kafka's group.max.session.timeout.ms
    # KIP-848's consumer protocol (group.protocol=consumer): Kafka's group.consumer.* settings
    consumer_session_timeout_ms: int = Field(default=45_000, ge=100)  # a member silent this long is removed
    consumer_heartbeat_interval_ms: int = Field(default=5_000, ge=10)  # how often members are told to heartbeat
    consumer_assignor: Literal["uniform", "range"] = "uniform"  # for groups whose members name none
    producer_id_expiration_ms: int = Field(default=86_400_000, ge=1)  # Kafka's producer.id.expiration.ms
    transaction_max_timeout_ms: int = Field(default=900_000, ge=1)  # Kafka's transaction.max.timeout.ms
    # Kafka's transaction.abort.timed.out.transaction.cleanup.interval.ms: the longest wait between two
    # looks for hung transactions (shorter for short transaction timeouts: a tenth of the shortest)
    transaction_abort_interval_ms: int = Field(default=10_000, ge=10)
    # How long the transactions table keeps a transactional id's older rows (its latest stays), and
    # how long an id idle in Empty or Complete* is remembered (Kafka's transactional.id.expiration.ms)
    transaction_history_retention_ms: int = Field(default=86_400_000, ge=0)
    transactional_id_expiration_ms: int = Field(default=604_800_000, ge=1)

    # Security (docs/serve.md): the listener's protocol, its TLS files, SASL's mechanisms and users
    # (principal name -> password), and permissions (none: everyone may do everything).
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_cafile: str | None = None
    ssl_client_auth: bool = False  # TLS client certificates required; their CN is the principal
    sasl_mechanisms: list[Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]] = list(MECHANISMS)
    users: dict[str, str] = Field(default_factory=dict)
    super_users: list[str] = Field(default_factory=list)  # principals allowed everything (User:admin)
    acls: list[Acl] | None = None

    @model_validator(mode="after")
    def _security(self) -> "ServeSettings":
        if self.security_protocol.endswith("SSL") and not self.ssl_certfile:
            raise ValueError(f"security_protocol {self.security_protocol} needs ssl_certfile (and ssl_keyfile)")
        if self.security_protocol.startswith("SASL") and not self.users:
            raise ValueError(f"security_protocol {self.security_protocol} needs users (principal name: password)")
        return self

    @model_validator(mode="after")
    def _limits(self) -> "ServeSettings":
        if self.queued_max_request_bytes < self.max_request_bytes:
            raise ValueError(f"queued_max_request_bytes ({self.queued_max_request_bytes}) must be at least "
                             f"max_request_bytes ({self.max_request_bytes}): a frame of that size could never be read")
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ValueError(f"group_min_session_timeout_ms ({self.group_min_session_timeout_ms}) is above "
                             f"group_max_session_timeout_ms ({self.group_max_session_timeout_ms}): no JoinGroup could join")
        return self

    @field_validator("listen", "advertised")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None:
            split_address(value)
        return value
