"""Replicas, leaders and failover: a topic kept at several storage roots (docs/replication.md).

One home for every replication rule: ``rules`` (pure), ``state`` (the ``topic_replicas`` rows),
``copy`` (a follower brought up to its leader in one commit), ``rounds`` (``replicate``),
``election`` (``elect-leader`` and finishing one), ``acks`` (an ``acks: all`` produce's wait),
``reads`` (the high watermark and the divergence check readers use), ``operations`` (the facade
the commands call), and ``model``, the protocol checked over interleavings.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Replication", "ReplicaReport", "FollowerStatus"]


def __getattr__(name: str) -> Any:  # the facade needs Spark; the rules and the model do not
    if name in __all__:
        from control_plane.replication import operations

        return getattr(operations, name)
    raise AttributeError(name)
