"""The bottom layer's settings: how Spark is built, and the strict base every settings model uses.

Each layer keeps its own settings beside it (``pipelines.settings``, ``control_plane.settings``);
``jobs.config`` composes them into the configuration file's model and loads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

PROJECT_ROOT = Path(__file__).resolve().parents[1]


class Strict(BaseModel):
    """Settings: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SparkSettings(Strict):
    """How the session factory builds Spark for this environment."""

    mode: Literal["local", "cluster", "databricks"] = "local"
    master: str | None = "local[2]"
    app_name: str = "lakelog"
    jars_dir: str = ".jars"
    packages: list[str] = Field(
        default_factory=lambda: ["io.delta:delta-spark_4.2_2.13:4.4.0"]
    )
    # Where Delta's internal classes live: open-source Delta ("oss") or Databricks' runtime.
    delta_internals: Literal["oss", "databricks"] = "oss"
    # "small": for many short jobs sharing one machine (group members, scheduled micro-jobs):
    # one core, 1 GB, quick-start JIT and no whole-stage codegen. About twice as fast on tiny
    # control-plane queries when four such JVMs share two cores; slower on big scans.
    profile: Literal["standard", "small"] = "standard"
    # Keep Spark's and the JVM's own log lines (start-up banner, warnings) off the terminal: only
    # errors (conf/log4j2-quiet.properties). The CLI's --verbose turns it off. Local mode only.
    quiet: bool = True
    # Which log store writes Delta's commit files (docs/operating.md, "Storage and concurrent
    # writers"). "lakelog": lakelog's put-if-absent store for the local file system and S3A (in
    # lakelog's jar), so that of two processes racing for a version exactly one wins. "delta":
    # Delta's default per scheme, safe on HDFS, ADLS Gen2 and GCS but not across processes on a
    # local disk or S3. Not set on Databricks, whose runtime commits safely itself.
    log_store: Literal["lakelog", "delta"] = "lakelog"
    # A Spark Connect server (``sc://host:port``) to run Spark's work on instead of a session in this
    # process; its own settings hold Delta (``conf`` gives session settings only).
    remote: str | None = None
    conf: dict[str, str] = Field(default_factory=dict)
