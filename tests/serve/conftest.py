"""A lakelog server over the test's root, serving from a thread of the test process (its Spark
session is the suite's)."""

from __future__ import annotations

import pytest


@pytest.fixture()
def served(spark, root):
    from serve.server import Server
    from serve.settings import ServeSettings

    server = Server(spark, root, ServeSettings(listen="127.0.0.1:0", linger_ms=5)).run_in_thread()
    yield server
    server.stop_thread()


def bootstrap(server) -> str:
    return f"127.0.0.1:{server.port}"
