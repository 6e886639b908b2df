"""SaslHandshake (v1) and SaslAuthenticate: a SASL connection names its mechanism, then
authenticates in SaslAuthenticate frames; until then it may send nothing else (serve.server)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from serve.errors import code_of
from serve.security import Authenticator

if TYPE_CHECKING:
    from serve.server import Connection, Server
    from serve.wire import Request


async def sasl_handshake(server: "Server", conn: "Connection", request: "Request") -> dict:
    if conn.authenticated:  # a listener without SASL, or a connection authenticated already: as Kafka's KafkaApis
        return {"error_code": code_of("ILLEGAL_SASL_STATE"), "mechanisms": []}
    mechanisms = list(server.settings.sasl_mechanisms)
    if request.body.mechanism not in mechanisms:
        return {"error_code": code_of("UNSUPPORTED_SASL_MECHANISM"), "mechanisms": mechanisms}
    conn.state["sasl"] = Authenticator(request.body.mechanism, server.settings.users, server.scram)
    return {"error_code": 0, "mechanisms": mechanisms}


async def sasl_authenticate(server: "Server", conn: "Connection", request: "Request") -> dict:
    if conn.authenticated:  # as Kafka's KafkaApis: answered, the connection kept
        return {"error_code": code_of("ILLEGAL_SASL_STATE"), "auth_bytes": b"", "session_lifetime": 0,
                "error_message": "SaslAuthenticate request received after successful authentication"}
    auth: Authenticator | None = conn.state.get("sasl")
    if auth is None:
        conn.closing = True
        return {"error_code": code_of("ILLEGAL_SASL_STATE"), "error_message": "SaslHandshake first",
                "auth_bytes": b"", "session_lifetime": 0}
    try:
        reply, done = await server.ctx.run(auth.step, bytes(request.body.auth_bytes))
    except ValueError as exc:
        conn.closing = True  # Kafka closes the connection after a failed authentication
        return {"error_code": code_of("SASL_AUTHENTICATION_FAILED"), "error_message": str(exc), "auth_bytes": b"",
                "session_lifetime": 0}
    if done:
        conn.principal, conn.authenticated = auth.principal, True
    return {"error_code": 0, "error_message": None, "auth_bytes": reply, "session_lifetime": 0}


HANDLERS = {
    17: (1, 1, sasl_handshake),
    36: (0, 2, sasl_authenticate),
}
