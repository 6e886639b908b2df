"""``lakelog serve`` hands the configuration's replication settings to the server, without Spark
(the server is a stand-in; its context is built without a session): ``replication.*`` (the time
lag ``acks=all`` produces drop a cut-off follower after) reaches the replica operations every
produce runs with, and ``serve.min_insync_replicas`` the server's settings its ``acks=all``
acknowledgements are checked against (a client's ``acks`` comes with each produce request)."""

from __future__ import annotations

from click.testing import CliRunner

from jobs.cli import cli
from jobs.context import Context
from serve.context import ServeContext


def test_serve_passes_the_replication_settings_to_the_server(tmp_path, monkeypatch):
    conf = tmp_path / "c.yaml"
    conf.write_text(f"root: {tmp_path / 'root'}\nserve:\n  min_insync_replicas: 2\n"
                    "replication:\n  max_lag_seconds: 7.5\n  max_lag_records: 12\n")
    built = {}

    class StandIn:
        def __init__(self, spark, root, settings, controller=None, replication=None):
            built.update(root=root, settings=settings, ctx=ServeContext(spark, root, settings, replication))

        def run_forever(self, listening) -> None:
            built["ctx"].close()

    monkeypatch.setattr("serve.server.Server", StandIn)
    monkeypatch.setattr(Context, "spark", None)  # no session: the stand-in never reads the root
    result = CliRunner().invoke(cli, ["serve", "--conf", str(conf), "--linger-ms", "3"])
    assert result.exit_code == 0, result.output
    assert built["root"] == str(tmp_path / "root")
    assert built["settings"].min_insync_replicas == 2 and built["settings"].linger_ms == 3
    replication = built["ctx"].replication()
    assert (replication.settings.max_lag_seconds, replication.settings.max_lag_records) == (7.5, 12)
    assert built["ctx"].replication().clock is replication.clock, "one failure clock for every produce"


def test_serve_on_a_port_already_taken_exits_1_with_one_line_saying_so(tmp_path, monkeypatch):
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    monkeypatch.setattr(Context, "spark", None)  # refused at the bind, before the server reads the root
    try:
        result = CliRunner().invoke(cli, ["serve", "--root", str(tmp_path / "root"), "--listen", f"127.0.0.1:{port}"])
    finally:
        taken.close()
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and f"cannot listen on 127.0.0.1:{port}" in lines[0] and "--listen" in lines[0], result.output


def test_the_listening_line_is_one_line_whatever_the_roots_length(tmp_path, monkeypatch):
    root = tmp_path / ("a-long-folder-name-" * 6) / "root"

    class StandIn:
        def __init__(self, spark, root, settings, controller=None, replication=None):
            self.host, self.port, self.advertised = "127.0.0.1", 19092, ("127.0.0.1", 19092)
            self.ctx = ServeContext(spark, root, settings, replication)
            self.ctx.node_id = 0

        def run_forever(self, listening) -> None:
            listening(self)
            self.ctx.close()

    monkeypatch.setattr("serve.server.Server", StandIn)
    monkeypatch.setattr(Context, "spark", None)
    result = CliRunner().invoke(cli, ["serve", "--root", str(root)])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("lakelog serve: node 0") and str(root) in lines[0], result.output
