"""An S3 API on 127.0.0.1 for the tests and benchmarks of roots on S3: moto's server in a process
of its own, with conditional writes made atomic.

moto answers ``PUT`` with ``If-None-Match: *`` by looking the key up and then storing the object,
two steps that concurrent requests can interleave; S3 does both as one. So requests that carry
``If-None-Match`` are served one at a time here, and racing writers meet the put-if-absent that
S3 gives them. Everything else is served concurrently, as moto does.

``S3Emulator(conditional_writes=False)`` serves a store that ignores ``If-None-Match`` (the header
is dropped before moto sees it), as some S3-compatible stores do: a second create of a key
replaces the first.

``python -m tests.s3_emulator PORT [--ignore-conditional-writes]`` serves until killed;
``S3Emulator`` starts and stops one.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
KEY, SECRET, REGION = "testing", "testing", "us-east-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _ConditionalWritesOneAtATime:
    """WSGI middleware: a request with ``If-None-Match`` holds one lock from start to answer (or,
    not ``honoured``, loses the header)."""

    def __init__(self, app, honoured: bool = True) -> None:
        self.app, self.lock, self.honoured = app, threading.Lock(), honoured

    def __call__(self, environ, start_response):
        if not self.honoured:
            environ.pop("HTTP_IF_NONE_MATCH", None)
        if "HTTP_IF_NONE_MATCH" not in environ:
            return self.app(environ, start_response)
        with self.lock:
            return list(self.app(environ, start_response))


def serve(port: int, conditional_writes: bool = True) -> None:
    from moto.server import DomainDispatcherApplication, create_backend_app
    from werkzeug.serving import make_server

    app = _ConditionalWritesOneAtATime(DomainDispatcherApplication(create_backend_app), conditional_writes)
    make_server("127.0.0.1", port, app, threaded=True).serve_forever()


class S3Emulator:
    """One emulator process; its endpoint, and its settings for S3A, delta-rs and boto3."""

    def __init__(self, conditional_writes: bool = True) -> None:
        self.conditional_writes = conditional_writes
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    def start(self) -> "S3Emulator":
        flags = [] if self.conditional_writes else ["--ignore-conditional-writes"]
        self.process = subprocess.Popen([sys.executable, "-m", "tests.s3_emulator", str(self.port), *flags], cwd=PROJECT,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the S3 emulator did not start") from None
                time.sleep(0.2)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(30)

    def __enter__(self) -> "S3Emulator":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def spark_conf(self) -> dict[str, str]:
        """S3A pointed at the emulator (path-style requests, plain HTTP, its credentials)."""
        return {
            "spark.hadoop.fs.s3a.endpoint": self.endpoint,
            "spark.hadoop.fs.s3a.endpoint.region": REGION,
            "spark.hadoop.fs.s3a.path.style.access": "true",
            "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
            "spark.hadoop.fs.s3a.access.key": KEY,
            "spark.hadoop.fs.s3a.secret.key": SECRET,
            "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        }

    def environment(self) -> dict[str, str]:
        """The same for delta-rs and boto3, as environment variables."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_REGION": REGION}

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=KEY, aws_secret_access_key=SECRET,
                            region_name=REGION)

    def create_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name


if __name__ == "__main__":
    serve(int(sys.argv[1]), "--ignore-conditional-writes" not in sys.argv[2:])
