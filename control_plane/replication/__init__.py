"""Replicas, leaders and failover: a topic kept at several storage roots (docs/replication.md).

One home for every replication rule: ``rules`` (pure), ``state`` (the ``topic_replicas`` rows),
``copy`` (a follower brought up to its leader in one commit), ``rounds`` (``replicate``),
``election`` (``elect-leader`` and finishing one), ``acks`` (an ``acks: all`` produce's wait),
``reads`` (the high watermark and the divergence check readers use), ``operations`` (the facade
the commands call: ``Replication``), and ``model``, the protocol checked over interleavings.
"""
