"""Who a connection is and what it may do: TLS, SASL (PLAIN, SCRAM-SHA-256/512) with principals
from the configuration, and per-principal permissions on topics, groups and transactional ids (docs/serve.md).

With no ``serve.acls`` configured, every principal may do everything (Kafka without an
authorizer); with ``acls``, a principal may do only what an entry allows it (super users
anything). An entry's ``name`` is a resource name, ``*``, or a prefix ending in ``*``. As in
Kafka, read, write, delete and alter each allow describe, alter_configs allows describe_configs,
and create on the cluster allows creating any topic.
"""

from __future__ import annotations

import hmac
import ssl
from typing import Literal

from pydantic import Field

from log_store.config import Strict

Operation = Literal["read", "write", "create", "delete", "alter", "describe", "describe_configs", "alter_configs",
                    "idempotent_write", "cluster_action", "all"]
IMPLIES = {"describe": {"read", "write", "delete", "alter"}, "describe_configs": {"alter_configs"}}
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class Acl(Strict):
    """One permission: ``principal`` (``User:alice``, or ``User:*``) may do ``operations`` on the
    ``resource`` (topic, group, cluster, transactional_id) named ``name``."""

    principal: str
    resource: Literal["topic", "group", "cluster", "transactional_id"]
    name: str = "*"
    operations: list[Operation] = Field(min_length=1)

    def matches(self, principal: str, resource: str, name: str) -> bool:
        if self.principal not in (principal, "User:*") or self.resource != resource:
            return False
        if self.name == "*" or self.name == name:
            return True
        return self.name.endswith("*") and name.startswith(self.name[:-1])

    def grants(self, operation: str) -> bool:
        ops = set(self.operations)
        return "all" in ops or operation in ops or bool(ops & IMPLIES.get(operation, set()))


def allowed(acls: list[Acl] | None, super_users: list[str], principal: str, operation: str, resource: str,
            name: str) -> bool:
    """Whether ``principal`` may do ``operation`` (Kafka's name, any case) on ``resource`` ``name``."""
    if acls is None or principal in super_users:
        return True
    operation, resource = operation.lower(), resource.lower()
    if any(a.matches(principal, resource, name) and a.grants(operation) for a in acls):
        return True
    return (resource == "topic" and operation == "create"
            and any(a.matches(principal, "cluster", "kafka-cluster") and a.grants("create") for a in acls))


def allowed_on_some(acls: list[Acl] | None, super_users: list[str], principal: str, operation: str,
                    resource: str) -> bool:
    """Whether ``principal`` may do ``operation`` on at least one ``resource`` (Kafka's
    ``authorizeByResourceType``: InitProducerId needs WRITE on some topic, or IDEMPOTENT_WRITE)."""
    if acls is None or principal in super_users:
        return True
    operation, resource = operation.lower(), resource.lower()
    return any(a.principal in (principal, "User:*") and a.resource == resource and a.grants(operation) for a in acls)


def tls_context(certfile: str, keyfile: str | None, cafile: str | None, client_auth: bool) -> ssl.SSLContext:
    """The listener's TLS: its certificate, and with ``client_auth`` clients' certificates signed by ``cafile``."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=cafile)
    context.load_cert_chain(certfile, keyfile)
    context.verify_mode = ssl.CERT_REQUIRED if client_auth else ssl.CERT_NONE
    return context


def tls_principal(peer_cert: dict | None) -> str | None:
    """``User:<CN>`` of a verified client certificate."""
    for rdn in (peer_cert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return f"User:{value}"
    return None


class Authenticator:
    """One connection's SASL exchange over SaslAuthenticate frames (Kafka's SaslHandshake v1)."""

    def __init__(self, mechanism: str, users: dict[str, str], scram: dict) -> None:
        self.mechanism = mechanism
        self.users = users
        self.scram = scram  # mechanism -> (scramp mechanism, user -> auth info)
        self._server = None
        self.principal: str | None = None

    def step(self, token: bytes) -> tuple[bytes, bool]:
        """(bytes to send back, done); ValueError when authentication fails."""
        if self.mechanism == "PLAIN":
            parts = token.split(b"\0")
            if len(parts) != 3:
                raise ValueError("malformed PLAIN token")
            user, password = parts[1].decode(), parts[2]
            expected = self.users.get(user)
            # in constant time, as Kafka's PlainServerCallbackHandler: how long a refusal takes tells nothing
            if expected is None or not hmac.compare_digest(password, expected.encode()):
                raise ValueError(f"authentication failed for user {user!r}")
            self.principal = f"User:{user}"
            return b"", True
        from scramp import ScramException

        mechanism, infos = self.scram[self.mechanism]

        def credentials(user: str):
            self._user = user
            return infos[user]

        try:
            if self._server is None:
                self._server = mechanism.make_server(credentials)
                self._server.set_client_first(token.decode())
                return self._server.get_server_first().encode(), False
            self._server.set_client_final(token.decode())
            self.principal = f"User:{self._user}"
            return self._server.get_server_final().encode(), True
        except (ScramException, KeyError, UnicodeDecodeError) as exc:
            raise ValueError(f"SCRAM authentication failed: {exc}") from None


def scram_credentials(users: dict[str, str], iterations: int = 4096) -> dict:
    """Each SCRAM mechanism's stored credentials for ``users`` (salted once, at start)."""
    from scramp import ScramMechanism

    out = {}
    for name in MECHANISMS[1:]:
        mechanism = ScramMechanism(name)
        out[name] = (mechanism, {u: mechanism.make_auth_info(p, iteration_count=iterations) for u, p in users.items()})
    return out
