"""One local Spark session per test run; a temporary root per test."""

from __future__ import annotations

import os

import pytest

from log_store.config import SparkSettings


@pytest.fixture(scope="session")
def spark():
    from chaos.host import GATEWAY_ENV
    from log_store.session import build_session

    session = build_session(SparkSettings())
    # Member and worker processes that do not test races across JVMs attach to this JVM
    # (chaos.host.session): 0.4 s to start instead of 15 s.
    params = session.sparkContext._gateway.gateway_parameters
    os.environ[GATEWAY_ENV] = f"{params.port}:{params.auth_token}"
    # This process serves format("lakelog") for its JVM, for processes attached to it too (py4j
    # calls back one Python process per JVM).
    from pipelines.spark import register

    register(session)
    yield session
    os.environ.pop(GATEWAY_ENV, None)
    session.stop()


@pytest.fixture()
def root(tmp_path) -> str:
    return str(tmp_path / "root")


@pytest.fixture(scope="session")
def s3():
    """An S3 API on 127.0.0.1 (tests/s3_emulator.py) for the tests of roots on S3."""
    from tests.s3_emulator import S3Emulator

    with S3Emulator() as emulator:
        yield emulator


@pytest.fixture(scope="session")
def connect_server():
    """A local Spark Connect server (tests/connect_server.py), started once, when first asked for."""
    from tests.connect_server import ConnectServer

    with ConnectServer() as server:
        yield server
