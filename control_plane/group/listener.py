"""The callbacks a group member fires as its partitions come and go: the consumer's hooks into
the group protocol (``control_plane.group.member``), apart so a consumer can name them alone."""

from __future__ import annotations

from control_plane.records import TopicPartition


class RebalanceListener:
    """Callbacks a member fires (Kafka's ConsumerRebalanceListener plus the source's per-key ones).

    Override what you need. ``on_partitions_revoked`` runs before the member commits and gives
    the partitions up; ``on_partitions_lost`` runs when the member learns it was expelled (its
    commits would be rejected). The per-key callbacks fire when a partition's keys start being
    delivered by this member and when they may move to another member.
    """

    def on_partitions_assigned(self, partitions: list[TopicPartition]) -> None: ...
    def on_partitions_revoked(self, partitions: list[TopicPartition]) -> None: ...
    def on_partitions_lost(self, partitions: list[TopicPartition]) -> None: ...
    def on_partition_keys_assigned(self, partitions: list[TopicPartition]) -> None: ...
    def on_partition_keys_maybe_revoked(self, partitions: list[TopicPartition]) -> None: ...
    def on_warmup_assigned(self, partitions: list[TopicPartition]) -> None: ...
