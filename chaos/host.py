"""One JVM that many short-lived Python processes attach to, so killing a process is cheap.

A campaign starts dozens of producers, controllers and group members per schedule and kills
them at random. Each starting its own JVM costs 15-20 s of CPU on this machine; attaching a new
Python process to a running JVM's py4j gateway costs about 0.4 s. Every attached process is a
real OS process with its own Python state and its own Spark session (``newSession``: own SQL
conf and temporary views); killing it with SIGKILL loses everything it had not committed, as a
crashed driver would. What it had already handed to the JVM (a commit in flight) completes:
the same as a crash just after that call. Delta's conflict detection is unchanged; some actors
of each schedule still start their own JVM, so races across JVMs stay covered.

``python -m chaos.host`` prints one JSON line (``{"gateway": ...}``) and serves until its
standard input closes. ``attach(gateway)`` returns a session on it.
"""

from __future__ import annotations

import json
import os
import sys

GATEWAY_ENV = "LAKELOG_CHAOS_GATEWAY"


def host_config():
    """The host's Spark: the local default with room for many concurrent small jobs."""
    from log_store.config import SparkSettings

    return SparkSettings(conf={
        "spark.driver.memory": "6g",
        "spark.scheduler.mode": "FAIR",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
    })


def serve() -> None:
    from log_store.session import build_session

    from log_store.session import gateway_of

    spark = build_session(host_config())
    print(json.dumps({"gateway": gateway_of(spark), "pid": os.getpid()}), flush=True)
    sys.stdin.read()  # until the campaign closes our standard input
    spark.stop()


def attach(gateway: str | None = None):
    """A new Spark session on the host JVM named by ``gateway`` (``port:secret``, default ``$LAKELOG_CHAOS_GATEWAY``)."""
    from log_store.session import attach as attach_session

    return attach_session(gateway or os.environ[GATEWAY_ENV])


def session(own_jvm: bool = False, remote: str | None = None):
    """The session an actor uses: attached to the host, (``own_jvm``) a JVM of its own, or
    (``remote``: ``sc://host:port``) a Spark Connect client of that server."""
    if remote:
        from log_store.config import SparkSettings
        from log_store.session import build_session

        return build_session(SparkSettings(remote=remote))
    if own_jvm or not os.environ.get(GATEWAY_ENV):
        from log_store.config import SparkSettings
        from log_store.session import build_session

        return build_session(SparkSettings(profile="small"))
    return attach()


if __name__ == "__main__":
    serve()
