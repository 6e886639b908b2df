"""``lakelog``: a Kafka-style command line over the log store, control plane and clients.

Every command takes ``--root`` (or ``$LAKELOG_ROOT``) and ``--conf`` (or ``$LAKELOG_CONF``);
read commands take ``--json``. Errors print what was wrong and exit non-zero.
"""

from __future__ import annotations

import json
import sys
from functools import cached_property

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from jobs.output import emit, stderr
from log_store.config import LakelogConfig, load_config
from log_store.errors import LakelogError


class Context:
    """Lazily built configuration and Spark session shared by the commands of one run."""

    def __init__(self, conf: str | None, root: str | None) -> None:
        self.conf_path = conf
        self.root_override = root

    @cached_property
    def config(self) -> LakelogConfig:
        return load_config(self.conf_path, self.root_override)

    @property
    def root(self) -> str:
        return self.config.root

    @cached_property
    def spark(self):
        from log_store.session import build_session

        return build_session(self.config)


pass_ctx = click.make_pass_decorator(Context)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


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
            stderr.print(f"error: {type(exc).__name__}: {exc}", style="bold red", highlight=False, markup=False, soft_wrap=True)
            ctx.exit(1)


@click.group(cls=LakelogGroup)
@click.option("--root", envvar="LAKELOG_ROOT", default=None, help="Root path or URI (default from conf: ./lakelog-data).")
@click.option("--conf", envvar="LAKELOG_CONF", default=None, help="Configuration YAML (default conf/local.yaml).")
@click.pass_context
def cli(ctx: click.Context, root: str | None, conf: str | None) -> None:
    """lakelog: a Kafka-style partitioned log in Delta Lake tables."""
    ctx.obj = Context(conf, root)


# -- topics ------------------------------------------------------------------------------------
@cli.group()
def topics() -> None:
    """Create, list and describe topics."""


def _admin(c: Context):
    from control_plane.topics import TopicAdmin

    return TopicAdmin(c.spark, c.root)


@topics.command("create")
@click.option("--topic", required=True)
@click.option("--partitions", required=True, type=int)
@json_option
@pass_ctx
def topics_create(c: Context, topic: str, partitions: int, as_json: bool) -> None:
    """Create TOPIC with N partitions."""
    c.config  # validate configuration before touching Spark
    record = _admin(c).create(topic, partitions)
    emit({"topic": record.topic, "partitions": record.partition_count, "location": record.location}, as_json, "created")


@topics.command("list")
@json_option
@pass_ctx
def topics_list(c: Context, as_json: bool) -> None:
    """List topics under the root."""
    rows = [
        {"topic": r.topic, "partitions": r.partition_count, "undeleted": r.undeleted_partition_count,
         "version": r.topic_version, "location": r.location}
        for r in _admin(c).list()
    ]
    emit(rows, as_json, "topics")


@topics.command("describe")
@click.option("--topic", required=True)
@json_option
@pass_ctx
def topics_describe(c: Context, topic: str, as_json: bool) -> None:
    """Partitions of TOPIC: location, leader epoch, mode, earliest and latest offset."""
    d = _admin(c).describe(topic)
    if as_json:
        emit(d.model_dump(mode="json"), True)
        return
    emit({k: v for k, v in d.model_dump(mode="json").items() if k != "partitions"}, False, f"topic {topic}")
    emit([p.model_dump(mode="json") for p in d.partitions], False, "partitions")


# -- produce / consume -------------------------------------------------------------------------
@cli.command()
@click.option("--topic", required=True)
@click.option("--input", "input_path", required=True, help="JSON Lines (.jsonl) or Parquet file.")
@click.option("--producer-id", default=None, help="Names the input stream; re-running with it resumes without duplicates.")
@click.option("--sequence-start", default=0, type=click.IntRange(min=0), help="Sequence of the first record (to continue a stream).")
@json_option
@pass_ctx
def produce(c: Context, topic: str, input_path: str, producer_id: str | None, sequence_start: int, as_json: bool) -> None:
    """Produce the records of an input file to TOPIC."""
    from pipelines.inputs import read_input
    from pipelines.producer import Producer

    c.config
    producer = Producer(c.spark, c.root, topic, producer_id, c.config.producer)
    records = read_input(c.spark, input_path)
    with progress_bar("producing batches") as bar:
        task = bar.add_task("produce", total=None)
        result = producer.send(records, sequence_start, lambda done, total: bar.update(task, completed=done, total=total))
    emit(result.model_dump(), as_json, "produced")


def _group_settings(c: Context, overrides: dict):
    """The configuration's group settings with the command line's overrides, validated."""
    from pydantic import ValidationError

    from log_store.config import GroupSettings
    from log_store.errors import InvalidConfigurationError

    merged = {**c.config.group.model_dump(), **{k: v for k, v in overrides.items() if v is not None}}
    try:
        return GroupSettings.model_validate(merged)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'group'}: {e['msg']}"
            + (f" (got {e['input']!r})" if e["loc"] else "")
            for e in exc.errors()
        )
        raise InvalidConfigurationError(f"invalid group settings: {problems}") from None


@cli.command()
@click.option("--topic", required=True)
@click.option("--group", required=True)
@click.option("--output", default=None, help="Delta sink table path: records are written there exactly once.")
@click.option("--max-records", default=None, type=click.IntRange(min=1))
@click.option("--member-id", default=None, help="Name this member (default: a random id).")
@click.option("--protocol", type=click.Choice(["eager", "cooperative"]), default=None, help="Rebalance protocol (conf: group.protocol).")
@click.option("--assignor", default=None, help="range, roundrobin, sticky or cooperative-sticky (conf: group.assignor).")
@click.option("--session-timeout-ms", type=int, default=None)
@click.option("--heartbeat-interval-ms", type=int, default=None)
@click.option("--idle-timeout", type=float, default=0.0, show_default=True,
              help="Seconds to stay in the group once caught up (0: leave as soon as caught up).")
@click.option("--standalone", is_flag=True, help="Consume every partition without joining the group (no membership).")
@json_option
@pass_ctx
def consume(c: Context, topic: str, group: str, output: str | None, max_records: int | None, member_id: str | None,
            protocol: str | None, assignor: str | None, session_timeout_ms: int | None, heartbeat_interval_ms: int | None,
            idle_timeout: float, standalone: bool, as_json: bool) -> None:
    """Consume TOPIC as a member of GROUP (to stdout, or exactly once to a Delta sink).

    Several processes with the same GROUP share the partitions; each leaves the group when it
    is caught up (after --idle-timeout) or has delivered --max-records.
    """
    from pipelines.consumer import Consumer
    from pipelines.group_consumer import GroupConsumer

    settings = _group_settings(c, {"protocol": protocol, "assignor": assignor, "session_timeout_ms": session_timeout_ms,
                                   "heartbeat_interval_ms": heartbeat_interval_ms})

    def print_batch(df, _ranges) -> None:
        for row in df.toLocalIterator():
            rec = {
                "partition": row["partition"], "offset": row["offset"], "leader_epoch": row["leader_epoch"],
                "key": None if row["key"] is None else bytes(row["key"]).decode("utf-8", "replace"),
                "value": bytes(row["value"]).decode("utf-8", "replace"),
                "timestamp": str(row["timestamp"]),
            }
            sys.stdout.write((json.dumps(rec) if as_json else "\t".join(str(v) for v in rec.values())) + "\n")

    with progress_bar("consuming records") as bar:
        task = bar.add_task("consume", total=max_records)
        update = lambda done, total: bar.update(task, completed=done, total=max_records)  # noqa: E731
        if standalone:
            consumer = Consumer(c.spark, c.root, topic, group, c.config.consumer, member_id)
            result = consumer.run_to_sink(output, max_records, update) if output else consumer.run(print_batch, max_records, update)
        else:
            member = GroupConsumer(c.spark, c.root, topic, group, c.config.consumer, settings, member_id)
            result = member.run(None if output else print_batch, output, max_records, idle_timeout,
                                on_batch=lambda _r, done: update(done, max_records))
    if output or not as_json:
        summary = result.model_dump()
        if as_json:
            emit(summary, True)
        else:
            stderr.print(f"consumed {result.records} records in {result.batches} batches ({result.seconds:.1f}s)")
        expired = getattr(result, "expired", 0)
        if expired:
            stderr.print(f"warning: {expired} records of retired partitions expired before group {group} read them "
                         f"(`lakelog groups describe --group {group}` lists them)", style="yellow", highlight=False)


# -- groups ------------------------------------------------------------------------------------
@cli.group()
def groups() -> None:
    """Inspect consumer groups."""


@groups.command("list")
@json_option
@pass_ctx
def groups_list(c: Context, as_json: bool) -> None:
    """Groups under the root with their latest generation, protocol and member count."""
    from control_plane.groups import list_groups

    emit(list_groups(c.spark, c.root), as_json, "groups")


@groups.command("describe")
@click.option("--group", required=True)
@json_option
@pass_ctx
def groups_describe(c: Context, group: str, as_json: bool) -> None:
    """Members, generation, protocol, each member's partitions, committed offsets, lag and metrics."""
    from control_plane.groups import describe_group

    d = describe_group(c.spark, c.root, group)
    if as_json:
        emit(d.model_dump(mode="json"), True)
        return
    head = {k: v for k, v in d.model_dump(mode="json").items() if k not in ("members", "partitions")}
    emit(head, False, f"group {group}")
    emit([{**m.model_dump(), "partitions": ",".join(m.partitions), "warmups": ",".join(m.warmups)} for m in d.members],
         False, "members")
    emit([p.model_dump() for p in d.partitions], False, "partitions")


# -- sql ---------------------------------------------------------------------------------------
@cli.command()
@click.argument("query")
@click.option("--limit", default=1000, show_default=True, help="Most rows to print.")
@json_option
@pass_ctx
def sql(c: Context, query: str, limit: int, as_json: bool) -> None:
    """Run Spark SQL with the control-plane tables registered (topics, partitions,
    topic_history, offset_commits, group_offsets, log_<topic>)."""
    from pyspark.errors import AnalysisException, ParseException

    from control_plane.layout import RootLayout
    from control_plane.tables import ControlTables

    ControlTables(c.spark, RootLayout(c.root)).register_views()
    try:
        rows = [r.asDict(recursive=True) for r in c.spark.sql(query).limit(limit).collect()]
    except (AnalysisException, ParseException) as exc:
        raise LakelogError(f"SQL error: {str(exc).splitlines()[0]}") from None
    emit(rows, as_json, "result")


# -- demo --------------------------------------------------------------------------------------
@cli.command()
@json_option
@pass_ctx
def demo(c: Context, as_json: bool) -> None:
    """Create a topic, produce keyed records, consume them with a group, and show what happened."""
    from jobs.demo import run_demo

    run_demo(c.spark, c.root, c.config, as_json)


# Commands kept in their own modules (they use the helpers above).
from jobs import audit_commands, controller_commands  # noqa: E402

controller_commands.register(cli, topics)
audit_commands.register(cli, topics)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
