"""``lakelog topics``: create, list, describe, alter, delete and draw topics (Kafka's ``kafka-topics``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click

from jobs.commands.table import table
from jobs.context import Context, json_option, pass_ctx
from jobs.output import emit, stderr, stdout
from log_store.log_metadata import LAYOUTS


@click.group()
def topics() -> None:
    """Create, list, describe, resize and picture topics."""


def _print_description(d, topic: str) -> None:
    emit({k: v for k, v in d.model_dump(mode="json").items() if k not in ("partitions", "config")}, False, f"topic {topic}")
    emit(d.config, False, "config")
    emit([p.model_dump(mode="json") for p in d.partitions], False, "partitions")


def _election_hint(c: Context, topic: str, report=None) -> str | None:
    """What to do when ``topic``'s leader log cannot be read: None unless it is replicated and its
    leader is what is lost."""
    report = report or c.replica_report(topic)
    if report is None or report.leader_error is None:
        return None
    from control_plane.replication.rules import election_advice

    readable = [f.root for f in report.followers if f.error is None]
    return f"The leader root {report.leader} of '{topic}' cannot be read: {election_advice(report, readable)}."


@contextmanager
def _leader_lost(c: Context, topic: str) -> Iterator[None]:
    """A replicated topic's lost leader root said as such, with the election that ends it."""
    from log_store.errors import LeaderNotAvailableError, StorageError

    try:
        yield
    except StorageError as exc:
        hint = _election_hint(c, topic)
        if hint is None:
            raise
        raise LeaderNotAvailableError(f"{exc}. {hint}") from exc


def _describe_lost_leader(c: Context, topic: str, error: Exception, as_json: bool) -> bool:
    """``describe`` of a replicated topic whose leader log cannot be read: the replicas as they are
    (each follower's log ends) and the election to run. False if that is not the case."""
    report = c.replica_report(topic)
    hint = _election_hint(c, topic, report)
    if hint is None:
        return False
    if as_json:
        emit({"topic": topic, "leader_available": False, "error": str(error), "hint": hint,
              "replication": report.model_dump(mode="json")}, True)
        return True
    stderr.print(f"{error}. {hint}", highlight=False, markup=False)
    partitions = sorted({p for f in report.followers for p in (f.log_ends or {})})
    emit([{"partition": p, "leader": f"{report.leader} (lost)", "leader_epoch": report.leader_epoch,
           "replicas": ", ".join(report.replicas), "in_sync": ", ".join(report.in_sync),
           "follower_log_ends": "; ".join(f"{f.root}: {'?' if f.log_ends is None else f.log_ends.get(p, 0)}"
                                          for f in report.followers)} for p in partitions], False,
         f"replicas (leader epoch {report.leader_epoch}, state version {report.replica_version})")
    return True


@topics.command("create")
@click.option("--topic", required=True)
@click.option("--partitions", required=True, type=int)
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE",
              help="A topic config (retention.ms, retention.bytes, segment.bytes, max.message.bytes, "
                   "cleanup.policy, ...); repeat for several.")
@click.option("--layout", type=click.Choice(list(LAYOUTS)), default=None,
              help="The log's files: a Delta partition per log partition (partitioned), or a file per "
                   "write holding every partition, compacted into files per partition (arrival).")
@click.option("--replicas", default=None, metavar="ROOT,ROOT,...",
              help="Keep a copy of the log at each root (the first leads; docs/replication.md).")
@json_option
@pass_ctx
def create(c: Context, topic: str, partitions: int, configs: tuple[str, ...], layout: str | None,
           replicas: str | None, as_json: bool) -> None:
    """Create TOPIC with N partitions (and --config KEY=VALUE topic configs)."""
    from control_plane.replication.rules import check_roots
    from control_plane.topic_config import parse_pairs, policies
    from log_store.errors import InvalidConfigurationError

    wanted = parse_pairs(list(configs))  # bad configs fail before the topic is made
    roots = check_roots(replicas.split(",")) if replicas is not None else None
    if roots is not None and "compact" in policies(wanted.get("cleanup.policy", "delete")):
        raise InvalidConfigurationError("a replicated topic keeps cleanup.policy=delete (a follower copies every "
                                        "record of its leader); nothing was created")
    c.config  # validate configuration before touching Spark
    record = c.topic_admin().create(topic, partitions, layout, roots)
    if configs:
        c.controller().alter_config(topic, list(configs))
    emit({"topic": record.topic, "partitions": record.partition_count, "location": record.location}, as_json, "created")


@topics.command("list")
@json_option
@pass_ctx
def list_(c: Context, as_json: bool) -> None:
    """List topics under the root."""
    rows = [
        {"topic": r.topic, "partitions": r.partition_count, "undeleted": r.undeleted_partition_count,
         "version": r.topic_version, "location": r.location,
         "state": "marked for deletion" if r.event.removes_topic else "live"}
        for r in c.topic_reader().list()
    ]
    emit(rows, as_json, "topics")


@topics.command("describe")
@click.option("--topic", required=True)
@json_option
@pass_ctx
def describe(c: Context, topic: str, as_json: bool) -> None:
    """Partitions of TOPIC: location, leader epoch, mode, earliest and latest offset."""
    from log_store.errors import StorageError

    try:
        d = c.topic_reader().describe(topic)
    except StorageError as exc:
        if _describe_lost_leader(c, topic, exc, as_json):
            return
        raise
    report = c.replica_report(topic)
    if report is not None:  # as readers get it: never below a partition's log start (retention at the leader)
        from control_plane.replication.rules import below_high_watermark

        starts = {p.partition: p.earliest_offset for p in d.partitions}
        report = report.model_copy(update={"high_watermark": below_high_watermark(
            report.leader_log_ends, report.high_watermark, starts)})
    if as_json:
        emit({**d.model_dump(mode="json"), "replication": report.model_dump(mode="json") if report else None}, True)
        return
    _print_description(d, topic)
    if report is not None:
        emit(replica_rows(report, {p.partition: p.leader_epoch for p in d.partitions}), False,
             f"replicas (leader epoch {report.leader_epoch}, state version {report.replica_version})")
        if report.leader_fenced:
            stderr.print(f"{fenced_leader(report)}: no produce lands until an election; run `{report.hint}`",
                         highlight=False, markup=False)


def fenced_leader(report) -> str:
    """Why the leader a replica report names does not lead at its epoch (``leader_told``)."""
    told, epoch = report.leader_told, report.leader_epoch
    if told is not None and told > epoch:
        return f"the leader {report.leader} was fenced by an election of epoch {told} that recorded nothing"
    if told is not None and told < epoch:
        return (f"the leader {report.leader} was elected at epoch {epoch}, but its log was told of epoch {told} only: "
                "its root came back from an older copy")
    return f"the election of {report.leader} at epoch {epoch} was recorded and could not be finished"


def replica_rows(report, epochs: dict[int, int]) -> list[dict]:
    """Per partition: leader root, leader epoch, replicas, in-sync set, high watermark, follower lag."""
    rows = []
    for p, end in sorted(report.leader_log_ends.items()):
        lags = [f"{f.root}: {'?' if f.log_ends is None else end - f.log_ends.get(p, 0)}" for f in report.followers]
        rows.append({"partition": p, "leader": report.leader, "leader_epoch": epochs.get(p, ""),
                     "replicas": ", ".join(report.replicas), "in_sync": ", ".join(report.in_sync),
                     "joining": ", ".join(report.joining),
                     "log_end": end, "high_watermark": report.high_watermark.get(p, 0),
                     "follower_lag": "; ".join(lags)})
    return rows


@topics.command("elect-leader")
@click.option("--topic", required=True)
@click.option("--leader", "leader", default=None, metavar="ROOT",
              help="The replica root to lead (--root stays the metadata root, as for every command).")
@click.option("--preferred", is_flag=True, help="Elect the preferred (first assigned) root.")
@click.option("--unclean", is_flag=True, help="Allow a root outside the in-sync set (it may lack acknowledged records).")
@click.option("--partition", "partitions", multiple=True, type=int,
              help="Accepted for Kafka's shape: a topic's partitions share one leader root here, so all move.")
@json_option
@pass_ctx
def elect_leader(c: Context, topic: str, leader: str | None, preferred: bool, unclean: bool,
                 partitions: tuple[int, ...], as_json: bool) -> None:
    """Move TOPIC's leadership to another replica root (failover), raising its leader epoch: the old
    leader's log is fenced first (if it can be reached), the new one catches up from it, then
    producers and consumers follow the topic's record to the new leader."""
    from log_store.errors import ReplicationError

    if bool(leader) == preferred:
        raise ReplicationError("give the root to elect with --leader ROOT, or --preferred (--root names the metadata "
                               "root, where the topic was created, as for every command)")
    c.config
    replication = c.replication()
    before = replication.state(topic)
    state = replication.elect(topic, leader, unclean, preferred)
    note = (f"--partition {','.join(map(str, partitions))}: a topic's partitions share one leader root in lakelog "
            f"(a produce is one commit across them), so every partition of '{topic}' is led by {state.leader} now "
            "(docs/replication.md)") if partitions else None
    if note and not as_json:
        stderr.print(note, highlight=False, markup=False)
    emit({"topic": topic, "leader": state.leader, "previous_leader": before.leader, "leader_epoch": state.leader_epoch,
          "in_sync": state.in_sync, "elected": state.replica_version != before.replica_version,
          **({"note": note} if note else {})}, as_json, "leader")


@topics.command("reassign")
@click.option("--topic", required=True)
@click.option("--replicas", required=True, metavar="ROOT,ROOT,...", help="The roots to keep the topic at (the first preferred).")
@json_option
@pass_ctx
def reassign(c: Context, topic: str, replicas: str, as_json: bool) -> None:
    """Move TOPIC to other replica roots while producers and consumers run: added roots are copied
    until in sync, leadership moves off a removed leader, then removed roots leave the assignment.
    Running it again finishes an interrupted reassignment."""
    from control_plane.replication.rules import check_roots

    roots = check_roots(replicas.split(","))
    c.config
    state = c.replication().reassign(topic, roots)
    emit({"topic": topic, "replicas": state.replicas, "leader": state.leader, "leader_epoch": state.leader_epoch,
          "in_sync": state.in_sync}, as_json, "reassigned")


@topics.command("delete")
@click.option("--topic", required=True)
@json_option
@pass_ctx
def delete(c: Context, topic: str, as_json: bool) -> None:
    """Delete TOPIC (Kafka's ``kafka-topics --delete``): fences its producers and consumers, removes
    its records and files, keeps its history. Re-running finishes a deletion that was interrupted."""
    c.config  # validate configuration before touching Spark
    record = c.controller().delete(topic)
    emit({"topic": topic, "deleted": True, "topic_version": record.topic_version, "location": record.location},
         as_json, "deleted")


@topics.command("alter")
@click.option("--topic", required=True)
@click.option("--partitions", default=None, type=int, help="The new number of undeleted partitions.")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE",
              help="Set a topic config (retention.ms, retention.bytes, segment.bytes, max.message.bytes, cleanup.policy, ...); "
                   "repeat for several.")
@click.option("--delete-config", "delete_configs", multiple=True, metavar="KEY",
              help="Remove a topic config (back to its default); repeat for several.")
@click.option("--delete-partition-enable/--no-delete-partition-enable", default=None,
              help="Allow shrinking (default: controller.delete_partition_enable or $LAKELOG_DELETE_PARTITION_ENABLE).")
@click.option("--layout", type=click.Choice(list(LAYOUTS)), default=None,
              help="Move the log to this layout: one commit rewriting every file, no record changed "
                   "(the records are read by a Spark job: starts a JVM).")
@json_option
@pass_ctx
def alter(c: Context, topic: str, partitions: int | None, configs: tuple[str, ...], delete_configs: tuple[str, ...],
          delete_partition_enable: bool | None, layout: str | None, as_json: bool) -> None:
    """Grow TOPIC to N partitions, or shrink it (marks partitions >= N for deletion; needs the switch),
    and/or change its configuration (--config retention.ms=604800000), and/or move its log to
    another layout (--layout arrival).

    Re-running a killed alter finishes it.
    """
    from control_plane.topic_config import parse_pairs
    from log_store.errors import InvalidConfigurationError

    if partitions is None and not configs and not delete_configs and layout is None:
        raise InvalidConfigurationError("nothing to alter: give --partitions N, --config KEY=VALUE, --delete-config KEY "
                                        "or --layout LAYOUT")
    parse_pairs(list(configs))  # bad configs fail before anything changes
    c.config  # validate configuration before touching Spark
    controller = c.controller(delete_partition_enable)
    with _leader_lost(c, topic):
        if layout is not None:
            controller.check_layout(topic, layout)  # before anything else changes
        result = controller.alter(topic, partitions) if partitions is not None else None
        config = controller.alter_config(topic, list(configs), list(delete_configs)) if configs or delete_configs else None
        moved = controller.change_layout(topic, layout) if layout is not None else None
        d = c.topic_admin().describe(topic)
    if as_json:
        emit({"result": result.model_dump(mode="json") if result else None,
              "config": config.model_dump(mode="json") if config else None,
              "layout": moved.model_dump(mode="json") if moved else None, "topic": d.model_dump(mode="json")}, True)
        return
    if result is not None and result.note:
        stderr.print(result.note, highlight=False, markup=False)
    if moved is not None:
        stderr.print(f"layout: {moved.previous} -> {moved.layout}" + (
            f", {moved.files_before} files rewritten as {moved.files_after}, {moved.records} records, log version "
            f"{moved.version}" if moved.version is not None else " (already; nothing to change)"),
            highlight=False, markup=False)
    _print_description(d, topic)


@topics.command("delete-records")
@click.option("--topic", required=True)
@click.option("--partition", "partitions", required=True, multiple=True, type=int,
              help="A partition; repeat for several (each gets the same --before-offset).")
@click.option("--before-offset", required=True, type=int,
              help="The new log start offset: records below it are deleted (at most the log end).")
@json_option
@pass_ctx
def delete_records(c: Context, topic: str, partitions: tuple[int, ...], before_offset: int, as_json: bool) -> None:
    """Delete TOPIC's records below an offset (Kafka's ``kafka-delete-records``): the partition's log
    start offset moves up, files wholly below it are removed, offsets are never reused. Groups
    positioned below it report the records expired and move up."""
    from log_store.errors import InvalidConfigurationError

    if before_offset < 0:
        raise InvalidConfigurationError(f"--before-offset {before_offset}: give an offset >= 0")
    c.config
    with _leader_lost(c, topic):
        changes = c.controller().delete_records(topic, {p: before_offset for p in partitions})
    rows = [{"partition": ch.partition, "previous_log_start": ch.previous, "log_start": ch.log_start,
             "files_removed": ch.files_removed, "log_version": ch.version} for ch in changes]
    if not rows and not as_json:
        stderr.print("nothing to delete: every log start is at or past that offset", highlight=False, markup=False)
    emit(rows, as_json, "log start offsets")


@topics.command("compact")
@click.option("--topic", required=True)
@click.option("--partition", "partitions", multiple=True, type=int, help="Only this partition; repeat for several.")
@click.option("--keys", is_flag=True,
              help="Clean keys instead (a topic with cleanup.policy=compact): each due partition keeps its keys' "
                   "latest records, as Kafka's log cleaner, what `controller tick` does for such a topic.")
@json_option
@pass_ctx
def compact(c: Context, topic: str, partitions: tuple[int, ...], keys: bool, as_json: bool) -> None:
    """Merge TOPIC's small files into files of its segment.bytes while producers and consumers
    run; partitions share a commit up to segment.bytes or 64 MiB of merged data, whichever is
    larger. No record changes: each commit is Delta's OPTIMIZE. With --keys, compact by key
    (docs/concepts.md, "Compacted topics"): a partition is cleaned when due (min.cleanable.dirty.ratio,
    max.compaction.lag.ms, tombstones past delete.retention.ms)."""
    c.config
    with _leader_lost(c, topic):
        if keys:
            results = c.controller().compact_keys(topic, list(partitions) or None)
        else:
            results = c.controller().compact(topic, list(partitions) or None)
    emit([r.model_dump(mode="json") for r in results], as_json, "keys cleaned" if keys else "compacted")


@topics.command("timeline")
@click.option("--topic", required=True)
@click.option("--output", default=None, help="PNG path (default <root>/timelines/<topic>.png).")
@json_option
@pass_ctx
def timeline(c: Context, topic: str, output: str | None, as_json: bool) -> None:
    """Draw TOPIC's history (modes, epochs, expansions, deletions, retirements) as a PNG."""
    from pipelines.timeline import write_timeline

    c.config
    path, events = write_timeline(c.spark, c.root, topic, output)
    if as_json:
        emit({"path": path, "events": [e.model_dump(mode="json") for e in events]}, True)
    else:
        stdout.print(path, highlight=False, soft_wrap=True)


topics.add_command(table)
