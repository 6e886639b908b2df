"""Per-topic configuration as Kafka names it (``retention.ms``, ``retention.bytes``,
``segment.bytes``, ``max.message.bytes``, ...), kept in the ``topic_configs`` control table, and the record of every log start
offset raised (``record_deletions``) and key compaction (``key_compactions``).

``topic_configs`` holds one row per change: the topic's whole configuration after it, numbered by
``config_version`` per topic log (``location``: a topic created again with the name is a new log
and starts from the defaults, as a Kafka topic's configuration goes with it). A log is known by
its place under its root (``log_key``), so a replicated topic keeps its configuration whichever
root leads it. The latest version
is the configuration. ``record_deletions`` holds one row per raised log start: the history that
``lakelog sql`` reads; the log's own commit (``log_store.log_files``) is what readers obey.

``cleanup.policy`` is Kafka's: ``delete`` (retention), ``compact`` (keep the latest record of each
key: ``log_store.key_compaction``) or both, with Kafka's compaction configs (``min.compaction.lag.ms``,
``max.compaction.lag.ms``, ``delete.retention.ms``, ``min.cleanable.dirty.ratio``) and defaults.

Defaults differ from Kafka's in one place: ``retention.ms`` is -1 (keep forever), not seven days,
so a topic made before retention existed keeps every record until someone sets a retention.
One config is lakelog's own: ``lakelog.placement``, where ``lakelog serve`` puts a Kafka producer's
records (docs/serve.md, "Placement"); a topic that sets none takes its server's ``serve.placement``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from log_store.errors import InvalidConfigurationError
from log_store.log_files import DEFAULT_TARGET_BYTES
from log_store.timestamp_types import CREATE_TIME, check_kind

CONFIG_SCHEMA = ("topic STRING NOT NULL, location STRING NOT NULL, config MAP<STRING, STRING>, "
                 "config_version INT NOT NULL, changed_at TIMESTAMP_NTZ, changed_by STRING")
LOG_START_SCHEMA = ("topic STRING NOT NULL, location STRING NOT NULL, partition INT NOT NULL, "
                    "previous_offset BIGINT, log_start_offset BIGINT NOT NULL, reason STRING, files_removed INT, "
                    "log_version BIGINT, changed_at TIMESTAMP_NTZ, changed_by STRING")
KEY_COMPACTION_SCHEMA = ("topic STRING NOT NULL, location STRING NOT NULL, partition INT NOT NULL, reason STRING, "
                         "records_before BIGINT, records_after BIGINT, files_removed INT, files_added INT, "
                         "previous_cleaned BIGINT, cleaned_up_to BIGINT NOT NULL, log_version BIGINT, "
                         "changed_at TIMESTAMP_NTZ, changed_by STRING")
LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
MAX_MESSAGE_BYTES = 1024 * 1024 + 12  # Kafka's default: 1 MiB and a batch's offset and length


class TopicConfig(BaseModel):
    """A topic's effective configuration. -1 means unlimited (Kafka's convention)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    retention_ms: int = Field(default=-1, alias="retention.ms")
    retention_bytes: int = Field(default=-1, alias="retention.bytes")
    segment_bytes: int = Field(default=DEFAULT_TARGET_BYTES, alias="segment.bytes")  # compaction's target file size
    cleanup_policy: str = Field(default="delete", alias="cleanup.policy")
    # key compaction (cleanup.policy compact): Kafka's names and defaults
    min_compaction_lag_ms: int = Field(default=0, alias="min.compaction.lag.ms")
    max_compaction_lag_ms: int = Field(default=LONG_MAX, alias="max.compaction.lag.ms")
    delete_retention_ms: int = Field(default=86_400_000, alias="delete.retention.ms")
    min_cleanable_dirty_ratio: float = Field(default=0.5, alias="min.cleanable.dirty.ratio")
    placement: str | None = Field(default=None, alias="lakelog.placement")  # None: the server's serve.placement
    # CreateTime: the producer's time; LogAppendTime: the append's (the log's property decides appends
    # and reads: log_store.timestamp_types)
    message_timestamp_type: str = Field(default=CREATE_TIME, alias="message.timestamp.type")
    # the largest record batch a Kafka client may produce (lakelog serve), as sent and uncompressed
    max_message_bytes: int = Field(default=MAX_MESSAGE_BYTES, alias="max.message.bytes")

    @property
    def policies(self) -> frozenset[str]:
        """The policies ``cleanup.policy`` lists (``compact,delete``: both)."""
        return policies(self.cleanup_policy)

    @property
    def compacted(self) -> bool:
        return "compact" in self.policies

    @property
    def deletes(self) -> bool:
        """Whether retention (``retention.ms``, ``retention.bytes``) applies."""
        return "delete" in self.policies

    def as_kafka(self) -> dict[str, str]:
        """Every config with its value; ``lakelog.placement`` only when the topic sets it."""
        return {k: str(v) for k, v in self.model_dump(by_alias=True).items() if v is not None}

    @classmethod
    def of(cls, config: dict[str, str]) -> "TopicConfig":
        return cls.model_validate({k: v for k, v in config.items()})


KEYS = {"retention.ms": (-1, LONG_MAX), "retention.bytes": (-1, LONG_MAX), "segment.bytes": (1024, INT_MAX),
        "max.message.bytes": (0, INT_MAX), "min.compaction.lag.ms": (0, LONG_MAX),
        "max.compaction.lag.ms": (1, LONG_MAX), "delete.retention.ms": (0, LONG_MAX)}
RATIOS = ("min.cleanable.dirty.ratio",)  # the keys whose values are fractions from 0 to 1
POLICIES = ("compact", "delete")
TIMESTAMP_TYPE = "message.timestamp.type"
PLACEMENT = "lakelog.placement"
PLACEMENTS = ("key", "client")  # by the key's murmur2 hash, or where the client addressed it (serve.placement)
WORDS = ("cleanup.policy", TIMESTAMP_TYPE, PLACEMENT, *RATIOS)  # the keys whose values are not whole numbers


def policies(value: str) -> frozenset[str]:
    """The policies of a ``cleanup.policy`` value: a comma-separated list of ``delete`` and
    ``compact`` (Kafka's list, in any order)."""
    found = [p.strip() for p in value.split(",")]
    if not found or any(p not in POLICIES for p in found) or len(set(found)) != len(found):
        raise InvalidConfigurationError(
            f"cleanup.policy={value}: give delete (retention by time and size), compact (keep the latest record "
            "of each key) or compact,delete (both)")
    return frozenset(found)


def parse_pairs(pairs: list[str]) -> dict[str, str]:
    """``key=value`` pairs (``--config``) checked: a known key, a number in range; else a clear error."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise InvalidConfigurationError(f"--config {pair!r}: give KEY=VALUE, e.g. retention.ms=604800000")
        check(key, value)
        out[key] = value
    check_lags(out)
    return out


def check_lags(config: dict[str, str]) -> None:
    """Kafka's rule across two keys: ``min.compaction.lag.ms`` at most ``max.compaction.lag.ms``."""
    low = int(config.get("min.compaction.lag.ms", 0))
    high = int(config.get("max.compaction.lag.ms", LONG_MAX))
    if low > high:
        raise InvalidConfigurationError(
            f"min.compaction.lag.ms={low} is above max.compaction.lag.ms={high}; give a minimum at most the maximum")


def check(key: str, value: str) -> None:
    if key == "cleanup.policy":
        policies(value)
        return
    if key in RATIOS:
        try:
            ratio = float(value)
        except ValueError:
            ratio = None
        if ratio is None or not 0 <= ratio <= 1:
            raise InvalidConfigurationError(f"{key}={value}: give a fraction from 0 to 1, e.g. 0.5")
        return
    if key == TIMESTAMP_TYPE:
        check_kind(value)
        return
    if key == PLACEMENT:
        if value not in PLACEMENTS:
            raise InvalidConfigurationError(
                f"{PLACEMENT}={value}: give key (keyed records by their key's murmur2 hash: each key's order across "
                "resizes) or client (every record where the client addressed it: Kafka's acknowledgements)")
        return
    if key not in KEYS:
        raise InvalidConfigurationError(
            f"unknown topic config {key!r}; known: {', '.join(sorted([*KEYS, *WORDS]))}")
    lo, hi = KEYS[key]
    try:
        number = int(value)
    except ValueError:
        number = None
    if number is None or not lo <= number <= hi:
        raise InvalidConfigurationError(
            f"{key}={value}: give a whole number from {lo} to {hi}" + (" (-1: unlimited)" if lo == -1 else ""))


def changed(current: dict[str, str], set_: dict[str, str], delete: list[str]) -> dict[str, str]:
    """The configuration after setting ``set_`` and removing ``delete`` (back to the default)."""
    for key in delete:
        if key not in KEYS and key not in WORDS:
            raise InvalidConfigurationError(f"--delete-config {key!r}: unknown topic config")
        if key in set_:
            raise InvalidConfigurationError(f"{key} is both set and deleted; give one")
    out = {k: v for k, v in current.items() if k not in delete}
    out.update(set_)
    check_lags(out)
    return out


def log_key(location: str) -> str:
    """A topic log's name under its root (``topics/<name>`` or ``topics/<name>~<incarnation>``):
    one incarnation of a topic, at whichever replica root. The key of its configuration and log
    starts: an election moves the location to another root, not to another log."""
    return "/".join(location.rstrip("/").rsplit("/", 2)[-2:])


def latest_config(rows: list[dict], location: str) -> tuple[int, dict[str, str]]:
    """(version, configuration) of the topic log at ``location`` among ``topic_configs`` rows."""
    key = log_key(location)
    mine = [r for r in rows if log_key(r["location"]) == key]
    if not mine:
        return 0, {}
    row = max(mine, key=lambda r: r["config_version"])
    config = row["config"] or {}
    return row["config_version"], dict(config) if not isinstance(config, list) else dict(config)


def recorded_log_starts(rows: list[dict], location: str) -> dict[int, int]:
    """The highest log start recorded per partition of the log at ``location``."""
    out: dict[int, int] = {}
    key = log_key(location)
    for r in rows:
        if log_key(r["location"]) == key:
            out[r["partition"]] = max(out.get(r["partition"], 0), r["log_start_offset"])
    return out
