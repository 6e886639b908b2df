"""Every version the server advertises works: each API at each version ApiVersions lists, sent
with plausible values (a real topic and group, tests/serve/requests.py), gets an answer that
parses at that version, with its correlation id, on a connection that stays open."""

from __future__ import annotations

import pytest
from kio.index import load_response_schema
from kio.serial import entity_reader

from tests.serve.raw import RawClient, batch, frame, produce
from tests.serve.requests import plausible

pytestmark = pytest.mark.kafka_clients
API_VERSIONS = {"client_software_name": "t", "client_software_version": "1"}


def _answer(port: int, key: int, version: int, values: dict) -> str | None:
    """None if the request is answered well, else what went wrong."""
    client = RawClient(port, timeout=30)
    try:
        client.send_bytes(frame(key, version, values, correlation_id=4242))
        data = client.read_frame()
        if data is None:
            return "the connection was closed"
        schema = load_response_schema(key, version)
        header_schema = schema.__header_schema__
        if key == 18:
            from kio.schema.response_header.v0.header import ResponseHeader as header_schema
        try:
            header, used = entity_reader(header_schema)(data, 0)
            _body, size = entity_reader(schema)(data, used)
        except Exception as exc:  # noqa: BLE001 - said in the failure
            return f"the answer does not parse: {type(exc).__name__}: {exc}"
        if header.correlation_id != 4242:
            return f"correlation id {header.correlation_id}"
        if used + size != len(data):
            return f"{len(data) - used - size} bytes after the answer"
        client.send_bytes(frame(18, 3, API_VERSIONS, correlation_id=4243))  # still open
        if client.read_frame() is None:
            return "the connection was closed after the answer"
        return None
    finally:
        client.close()


def test_every_api_at_every_advertised_version_gets_a_well_formed_answer(served):
    served.ctx.admin.create("orders", 2)
    served.ctx.admin.create("doomed", 1)
    client = RawClient(served.port)
    assert produce(client, "orders", 0, batch([b"a", b"b"])) == (0, 0)
    advertised = client.call(18, 3, API_VERSIONS).api_keys
    client.close()
    failures, sent = [], 0
    for api in advertised:
        for version in range(api.min_version, api.max_version + 1):
            # a group of its own for each JoinGroup (a group waits for the members it knows to join again)
            group = f"joining-{version}" if api.api_key == 11 else "billing"
            values = plausible(api.api_key, version, "doomed" if api.api_key == 20 else "orders", group)
            if api.api_key in (19, 37):  # CreateTopics, CreatePartitions: checked, nothing changed
                values["validate_only"] = True
            problem = _answer(served.port, api.api_key, version, values)
            sent += 1
            if problem:
                failures.append(f"API {api.api_key} v{version}: {problem}")
    assert sent > 100
    assert not failures, "\n".join(failures)
