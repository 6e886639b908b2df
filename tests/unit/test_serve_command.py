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
