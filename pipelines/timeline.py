"""A picture of a topic's life, drawn from the control plane's ``topics`` history.

Each row of ``control/topics`` is the whole topic after one change, so the history replays into
a strip per partition: its mode between versions, with markers where its epoch was bumped, where
it was added, marked for deletion or retired. x is the topic version (events are often seconds
apart and months apart in the same topic, so time would squash them); tick labels give the time.
"""

from __future__ import annotations

import io
from datetime import datetime

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from pydantic import BaseModel, Field
from pyspark.sql import SparkSession

from control_plane.image import TopicImage
from control_plane.layout import RootLayout
from control_plane.records import PartitionState, TopicEvent, TopicRecord
from control_plane.topics import TopicAdmin
from log_store.errors import UnknownTopicError
from log_store.files import write_file

MODE_COLOURS = {"ReadWrite": "#4c9a5b", "ReadOnly": "#e39b2d", "None": "#b0b0b0"}
MARKERS = {"added": ("P", "#1f5fa8"), "marked": ("v", "#c0392b"), "retired": ("X", "#222222")}


class TimelineEvent(BaseModel):
    """What one topic version changed, partition by partition."""

    topic_version: int
    event: str
    changed_at: datetime
    partition_count: int
    undeleted_partition_count: int
    added: list[int] = Field(default_factory=list)
    marked: list[int] = Field(default_factory=list)
    retired: list[int] = Field(default_factory=list)
    epochs: dict[int, int] = Field(default_factory=dict)  # partitions whose epoch changed: new epoch
    leader: str | None = None  # a replicated topic's election: the root whose log leads from here


def topic_history(spark: SparkSession, root: str, topic: str) -> list[TopicRecord]:
    """Every row of ``topic`` in the control plane, oldest first."""
    history = TopicAdmin(spark, root).image(topic).records
    if not history:
        raise UnknownTopicError(f"unknown topic '{topic}' under {RootLayout(root).root}; see `lakelog topics list`")
    return history


def _gone(p: PartitionState) -> bool:
    return p.mode.value == "None" or p.retired_at is not None


def timeline_events(history: list[TopicRecord]) -> list[TimelineEvent]:
    """Per version, which partitions were added, marked, retired or re-epoched (the image's replay)."""
    return [
        TimelineEvent(
            topic_version=c.version, event=c.record.event.value, changed_at=c.record.changed_at,
            partition_count=c.record.partition_count, undeleted_partition_count=c.record.undeleted_partition_count,
            added=c.added, marked=c.marked, retired=[p.partition for p in c.retired], epochs=c.epochs,
            leader=c.record.location.rsplit("/topics/", 1)[0] if c.record.event is TopicEvent.ELECT_LEADER else None,
        )
        for c in TopicImage(history[0].topic if history else "", history).changes()
    ]


def draw_timeline(topic: str, history: list[TopicRecord]) -> bytes:
    """The PNG: a bar per partition coloured by mode over versions, markers for each change."""
    events = timeline_events(history)
    n = len(history)
    parts = sorted({p.partition for rec in history for p in rec.partitions})
    fig = Figure(figsize=(max(8.0, 1.9 * n + 3), max(3.5, 0.55 * len(parts) + 2.2)), dpi=110)
    ax = fig.add_subplot()
    for i, rec in enumerate(history):
        for p in rec.partitions:
            ax.broken_barh([(i, 1)], (p.partition - 0.35, 0.7), facecolors=MODE_COLOURS[p.mode.value],
                           edgecolor="white", linewidth=1.5, hatch="//" if p.mode.value == "None" else None)
    for i, ev in enumerate(events):
        for kind, (marker, colour) in MARKERS.items():
            qs = getattr(ev, kind)
            if qs:
                ax.scatter([i + 0.08] * len(qs), qs, marker=marker, s=90, color=colour, zorder=3,
                           edgecolors="white", linewidths=0.8)
        for q, epoch in ev.epochs.items():
            ax.annotate(f"e{epoch}", (i + 0.5, q), ha="center", va="center", fontsize=8, color="white", weight="bold")
    ax.set_xlim(0, n)
    ax.set_xticks([i + 0.5 for i in range(n)])
    ax.set_xticklabels([f"v{e.topic_version} {e.event}" + (f" -> {e.leader.rstrip('/').rsplit('/', 1)[-1]}" if e.leader else "")
                        + f"\n{e.changed_at:%Y-%m-%d %H:%M:%S}" for e in events], fontsize=8)
    ax.set_ylim(max(parts, default=0) + 0.7, -0.7)
    ax.set_yticks(parts)
    ax.set_yticklabels([f"p{p}" for p in parts])
    ax.set_xlabel("topic version (control-plane change)")
    ax.set_ylabel("partition")
    last = history[-1]
    retired = sum(_gone(p) for p in last.partitions)
    ax.set_title(f"topic {topic}: {last.partition_count} partitions, {last.undeleted_partition_count} undeleted, "
                 f"{retired} retired (version {last.topic_version}, {len(history)} changes)")
    handles = [Patch(facecolor=c, label=m, hatch="//" if m == "None" else None) for m, c in MODE_COLOURS.items()]
    handles += [Line2D([], [], marker=m, color=c, linestyle="", markersize=9, label=f"partition {k}")
                for k, (m, c) in MARKERS.items()]
    handles.append(Patch(facecolor="none", edgecolor="none", label="eN: leader epoch set at this version"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png")
    return out.getvalue()


def write_timeline(spark: SparkSession, root: str, topic: str, output: str | None = None) -> tuple[str, list[TimelineEvent]]:
    """Draw ``topic``'s history to ``output`` (default ``<root>/timelines/<topic>.png``)."""
    history = topic_history(spark, root, topic)
    path = output or f"{RootLayout(root).root}/timelines/{topic}.png"
    write_file(spark, path, draw_timeline(topic, history))
    return path, timeline_events(history)
