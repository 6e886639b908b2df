"""What every command shares: the run's configuration and Spark session (built lazily, once),
the ``--json`` option, progress bars, and the way errors end a command (one line, exit 1)."""

from __future__ import annotations

import os

from functools import cached_property

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from jobs.output import stderr
from jobs.config import LakelogConfig, load_config
from log_store.errors import LakelogError, RetriableError


class Context:
    """Lazily built configuration and Spark session shared by the commands of one run."""

    def __init__(self, conf: str | None, root: str | None, as_json: bool = False, verbose: bool = False,
                 remote: str | None = None) -> None:
        self.conf_path = conf
        self.root_override = root
        self.as_json = as_json
        self.verbose = verbose
        self.remote = remote  # a Spark Connect server for Spark's work (else the configuration's, or $SPARK_REMOTE)

    @cached_property
    def config(self) -> LakelogConfig:
        return load_config(self.conf_path, self.root_override)

    @property
    def root(self) -> str:
        return self.config.root

    @property
    def spark_settings(self):
        """The configuration's Spark settings with the command line's: ``--remote``, ``--verbose``."""
        settings = self.config.spark
        if self.remote:
            settings = settings.model_copy(update={"remote": self.remote})
        return settings.model_copy(update={"quiet": False}) if self.verbose else settings

    @cached_property
    def spark(self):
        from log_store.session import LazySession, build_session

        return LazySession(lambda: build_session(self.spark_settings), self.config.spark.conf)

    def topic_admin(self):
        from control_plane.topics import TopicAdmin

        return TopicAdmin(self.spark, self.root)

    def fast_reads(self) -> bool:
        """Read-only commands read with delta-rs (no JVM to start) on a local root and on S3, with
        the storage options of S3A's settings in the configuration (``fast_storage``); with Spark
        on other stores or when ``LAKELOG_FAST_READS=0`` (``object_store.delta_rs_reads``)."""
        return self._delta_rs_reads[0]

    @property
    def fast_storage(self) -> dict[str, str] | None:
        """delta-rs storage options of the root where ``fast_reads``."""
        return self._delta_rs_reads[1]

    @cached_property
    def _delta_rs_reads(self) -> tuple[bool, dict[str, str] | None]:
        from log_store.object_store import delta_rs_reads

        return delta_rs_reads(self.spark, self.root)

    def topic_reader(self):
        """What read-only topic commands read with (see ``fast_reads``)."""
        if self.fast_reads():
            from control_plane.fast_reads import FastTopicReader

            return FastTopicReader(self.root, self.fast_storage)
        return self.topic_admin()

    def read_groups(self, answer):
        """``answer(reader)`` with what read-only group commands read with (see ``fast_reads``);
        with Spark when delta-rs cannot give commit order (old commit files cleaned up)."""
        from control_plane.group.store import GroupTables

        if self.fast_reads():
            from control_plane.fast_reads import FastGroupReader
            from log_store.rs_reader import FastReadUnavailable

            try:
                return answer(FastGroupReader(self.root, self.fast_storage))
            except FastReadUnavailable:
                pass
        return answer(GroupTables(self.spark, self.root))

    def replication(self):
        from control_plane.replication.operations import Replication

        return Replication(self.spark, self.root, self.config.replication)

    def replica_report(self, topic: str):
        """A replicated topic's replicas as they are now; None for an unreplicated topic (on a local
        root known without starting Spark: no replicated topic was ever created there)."""
        from control_plane.layout import RootLayout
        from control_plane.replication.state import TABLE

        layout = RootLayout(self.root)
        if layout.is_local and not os.path.isdir(os.path.join(layout.control(TABLE), "_delta_log")):
            return None
        replication = self.replication()
        if replication.admin.replica_state(topic) is None:
            return None
        return replication.describe(topic)

    def controller(self, delete_partition_enable: bool | None = None):
        from control_plane.controller import TopicController

        settings = self.config.controller
        if delete_partition_enable is not None:
            settings = settings.model_copy(update={"delete_partition_enable": delete_partition_enable})
        return TopicController(self.spark, self.root, settings)

    def group_settings(self, overrides: dict):
        """The configuration's group settings with the command line's overrides, validated."""
        from pydantic import ValidationError

        from control_plane.settings import GroupSettings
        from log_store.errors import InvalidConfigurationError

        merged = {**self.config.group.model_dump(), **{k: v for k, v in overrides.items() if v is not None}}
        try:
            return GroupSettings.model_validate(merged)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'group'}: {e['msg']}"
                + (f" (got {e['input']!r})" if e["loc"] else "")
                for e in exc.errors()
            )
            raise InvalidConfigurationError(f"invalid group settings: {problems}") from None


pass_ctx = click.make_pass_decorator(Context)

REMOTE_HELP = ("Spark Connect server to run Spark jobs on; default: the configuration's spark.remote, else "
               "$SPARK_REMOTE, else Spark in this process")


def _json_flag(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    root = ctx.find_object(Context)
    return bool(value or (root and root.as_json))


json_option = click.option("--json", "as_json", is_flag=True, callback=_json_flag, help="Print JSON for scripts.")


def _setter(field: str):
    def callback(ctx: click.Context, _param: click.Parameter, value):
        if value not in (None, False):
            setattr(ctx.find_object(Context), field, value)
        return value
    return callback


def global_options() -> list[click.Option]:
    """The root's options, also accepted after the verb (``lakelog topics list --root X``), as
    Kafka's tools take their connection options. Given after the verb, they win."""
    return [
        click.Option(["--root"], expose_value=False, callback=_setter("root_override"),
                     help="Root path or URI (also before the verb; $LAKELOG_ROOT)."),
        click.Option(["--conf"], expose_value=False, callback=_setter("conf_path"),
                     help="Configuration YAML (also before the verb; $LAKELOG_CONF)."),
        click.Option(["--verbose"], is_flag=True, expose_value=False, callback=_setter("verbose"),
                     help="Show Spark's and the JVM's own log lines."),
        click.Option(["--remote"], metavar="sc://HOST:PORT", expose_value=False, callback=_setter("remote"),
                     help=REMOTE_HELP + " (also before the verb)."),
    ]


def add_global_options(group: click.Group) -> None:
    """Give every command under ``group`` the global options."""
    for command in group.commands.values():
        if isinstance(command, click.Group):
            add_global_options(command)
        else:
            command.params.extend(global_options())


def progress_bar(label: str) -> Progress:
    return Progress(
        TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=stderr, transient=False
    )


class LakelogGroup(click.Group):
    """Turns lakelog's errors into a one-line message and exit code 1, for every subcommand."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except LakelogError as exc:
            hint = " (retriable: nothing was half-written; run the command again)" if isinstance(exc, RetriableError) else ""
            stderr.print(f"error: {type(exc).__name__}: {exc}{hint}", style="bold red", highlight=False, markup=False,
                         soft_wrap=True)
            ctx.exit(1)
