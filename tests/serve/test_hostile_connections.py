"""Clients that stall or fill the server: a large frame before SASL authentication, frames whose
parsing would hold the event loop, idle connections, too many connections, and partial frames
held open (by one address, or by connections not yet authenticated). Each is refused or bounded as Kafka's broker does (docs/serve.md, "Limits"), and
everyone else is served meanwhile."""

from __future__ import annotations

import socket
import struct
import threading
import time
from pathlib import Path

import pytest

from tests.serve.conftest import ServerProcess
from tests.serve.raw import RawClient, metadata_request, sized

pytestmark = pytest.mark.kafka_clients
API_VERSIONS = {"client_software_name": "t", "client_software_version": "1"}
MIB = 1 << 20


def closed_by_server(sock: socket.socket, within: float = 10) -> bool:
    """Whether the server closes ``sock`` within ``within`` seconds (a timeout: it did not)."""
    sock.settimeout(within)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def api_versions_ok(client: RawClient) -> bool:
    return int(client.call(18, 3, API_VERSIONS).error_code) == 0


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))


def test_a_large_frame_before_sasl_authentication_closes_the_connection(serve_with):
    server = serve_with(security_protocol="SASL_PLAINTEXT", users={"alice": "alice-secret"})
    client = RawClient(server.port, timeout=10)
    assert api_versions_ok(client)  # what a client sends before authenticating is served
    client.send_bytes(struct.pack(">i", 512 * 1024 + 1))  # a header, and nothing more
    assert closed_by_server(client.sock)

    client = RawClient(server.port, timeout=10)  # after authentication, the frame limit is max_request_bytes
    assert int(client.call(17, 1, {"mechanism": "PLAIN"}).error_code) == 0
    assert int(client.call(36, 2, {"auth_bytes": b"\0alice\0alice-secret"}).error_code) == 0
    large = client.call(18, 3, {"client_software_name": "t", "client_software_version": "1" * 600_000})
    assert int(large.error_code) == 0
    client.close()


def test_frames_strangers_never_finish_do_not_hold_back_an_authenticated_clients_large_request(serve_with):
    """Five unauthenticated connections each announce a 500 KiB frame and send one byte of it: past
    the first, they wait for their quarter of the 2 MiB bound, and an authenticated client's
    200 KiB request is answered at once (it waited behind them, for as long as they stayed)."""
    server = serve_with(security_protocol="SASL_PLAINTEXT", users={"alice": "alice-secret"},
                        max_request_bytes=MIB, queued_max_request_bytes=2 * MIB)
    strangers = [connect(server.port) for _ in range(5)]
    try:
        for sock in strangers:
            sock.sendall(struct.pack(">i", 500 * 1024) + b"\0")
        time.sleep(0.5)
        client = RawClient(server.port, timeout=10)
        assert int(client.call(17, 1, {"mechanism": "PLAIN"}).error_code) == 0
        assert int(client.call(36, 2, {"auth_bytes": b"\0alice\0alice-secret"}).error_code) == 0
        started = time.monotonic()
        large = client.call(18, 3, {"client_software_name": "t", "client_software_version": "1" * 200_000})
        assert int(large.error_code) == 0 and time.monotonic() - started < 5
        client.close()
    finally:
        for sock in strangers:
            sock.close()


def test_large_frames_are_parsed_while_every_other_connection_is_served(spark, root):
    from kio.schema.metadata.v12.response import MetadataResponse
    from kio.serial import entity_reader

    server = ServerProcess(root, 0)  # its own process: a server in this one would hold this test's threads too
    name = b"a" * 249
    answers = {}

    def send(key: str, data: bytes) -> None:
        client = RawClient(server.port, timeout=120)
        client.send_bytes(data)
        answers[key] = client.read_frame()
        client.close()

    try:
        senders = [threading.Thread(target=send, args=("valid", sized(metadata_request(name, 90_000)))),  # 24 MiB
                   threading.Thread(target=send, args=("too many", sized(metadata_request(b"junk", 1_500_000))))]  # 31 MiB
        pinger = RawClient(server.port, timeout=120)
        assert api_versions_ok(pinger)
        for thread in senders:
            thread.start()
        worst, deadline = 0.0, time.monotonic() + 90
        while any(t.is_alive() for t in senders) and time.monotonic() < deadline:
            started = time.monotonic()
            assert api_versions_ok(pinger)
            worst = max(worst, time.monotonic() - started)
            time.sleep(0.005)
        for thread in senders:
            thread.join(30)
        pinger.close()
    finally:
        server.stop()
    print(f"the slowest ApiVersions round trip while large frames were parsed: {worst * 1000:.0f} ms")
    assert worst < 0.5, f"an ApiVersions round trip took {worst:.2f} s while large frames were parsed"
    assert answers["too many"] is None  # more array elements than any client sends: closed
    response, _ = entity_reader(MetadataResponse)(answers["valid"], 5)  # after the header (correlation id, tags)
    assert [(t.name, int(t.error_code)) for t in response.topics] == [(name.decode(), 3)]  # each name once


def test_an_idle_connection_is_closed_and_a_busy_one_is_not(serve_with):
    server = serve_with(connections_max_idle_ms=500)
    server.ctx.admin.create("t", 1)
    idle = connect(server.port)
    talking = RawClient(server.port, timeout=10)
    waiting = RawClient(server.port, timeout=10)
    fetch = {"replica_id": -1, "max_wait": 2000, "min_bytes": 1, "max_bytes": MIB, "isolation_level": 0,
             "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": MIB}]}],
             "forgotten_topics_data": []}
    answers = []  # a fetch waiting 2 s for records that never come: in progress, not idle
    fetching = threading.Thread(target=lambda: answers.append(waiting.call(1, 12, fetch)))
    started = time.monotonic()
    fetching.start()
    while time.monotonic() - started < 3:
        assert api_versions_ok(talking)
        time.sleep(0.1)
    fetching.join(10)
    assert int(answers[0].responses[0].partitions[0].error_code) == 0
    assert closed_by_server(idle, within=5)
    assert closed_by_server(waiting.sock, within=5)  # once answered, idle in its turn
    talking.close()


def test_connections_over_the_limits_are_closed_at_once(serve_with):
    server = serve_with(max_connections=5, max_connections_per_ip=3)
    first = [connect(server.port) for _ in range(3)]
    over_address = connect(server.port)
    assert closed_by_server(over_address, within=5)  # a fourth from 127.0.0.1
    others = [connect(server.port, "127.0.0.2"), connect(server.port, "127.0.0.3")]
    over_total = connect(server.port, "127.0.0.4")
    assert closed_by_server(over_total, within=5)  # a sixth in all
    for sock in first + others:
        assert not closed_by_server(sock, within=0.2)
    first.pop().close()
    time.sleep(0.2)
    client = RawClient(server.port, timeout=10)  # a place was freed
    assert api_versions_ok(client)
    for sock in first + others + [client.sock]:
        sock.close()


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_partial_frames_held_open_do_not_grow_the_servers_memory_past_the_bound(spark, root):
    server = ServerProcess(root, 0)
    socks = []
    try:
        client = RawClient(server.port, timeout=10)
        assert api_versions_ok(client)
        before = _rss_mib(server.proc.pid)

        def hold(sock: socket.socket) -> None:
            try:  # 95 MiB announced, 90 MiB sent, then nothing
                sock.sendall(struct.pack(">i", 95 * MIB) + b"\0" * (90 * MIB))
            except OSError:
                pass

        socks = [connect(server.port) for _ in range(8)]
        for sock in socks:
            sock.settimeout(None)
        holders = [threading.Thread(target=hold, args=(s,), daemon=True) for s in socks]
        for thread in holders:
            thread.start()
        deadline = time.monotonic() + 30
        while not any(not t.is_alive() for t in holders) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(2)  # what more the server would read
        grown = _rss_mib(server.proc.pid) - before
        started = time.monotonic()
        assert api_versions_ok(client)  # small requests are served while the bound is full
        assert time.monotonic() - started < 1
        client.close()
        print(f"8 partial frames of 90 MiB: the server's memory grew by {grown:.0f} MiB")
        assert grown < 320, f"8 partial frames of 90 MiB took the server's memory up by {grown:.0f} MiB"
    finally:
        for sock in socks:
            sock.close()
        server.stop()
