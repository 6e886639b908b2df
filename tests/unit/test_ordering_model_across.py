"""The ordering model (``test_ordering_model``) with lakelog's key compaction across resizes: a
record also goes once its key has a record from after a later resize in another partition
(docs/concepts.md, compacted topics), so a partition's last records before a bump can go."""

from __future__ import annotations

import os

import pyarrow as pa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import rule

from control_plane.image import TopicImage
from log_store.key_order import eras
from pipelines.gating import barriers_of
from tests.unit.test_ordering_model import OrderingModel


class AcrossResizes(OrderingModel):
    @rule(data=st.data())
    def compact_across(self, data):
        """Records of one partition below a point whose key has a record of a later era in another."""
        p = data.draw(st.sampled_from(sorted(self.rows) or [0]))
        if not self.rows[p]:
            return
        below = data.draw(st.integers(self.rows[p][0][0], self.end[p]))
        barriers = barriers_of(TopicImage("t", self.history))
        flat = [(q, o, e, k, s) for q, rows in self.rows.items() for o, e, k, s in rows]
        era = eras(pa.array([r[0] for r in flat], pa.int64()), pa.array([r[2] for r in flat], pa.int64()), barriers)
        era_of = {(r[0], r[1]): x for r, x in zip(flat, era.to_pylist())}
        top: dict[str, list[tuple[int, int]]] = {}
        for q, o, _e, k, _s in flat:
            top.setdefault(k, []).append((q, era_of[(q, o)]))
        gone = {(o, k, s) for o, e, k, s in self.rows[p]
                if o < below and any(q != p and x > era_of[(p, o)] for q, x in top[k])}
        self.compacted |= {(k, s) for _o, k, s in gone}
        self.rows[p] = [r for r in self.rows[p] if (r[0], r[2], r[3]) not in gone]


AcrossResizes.TestCase.settings = settings(max_examples=int(os.environ.get("ORDERING_MODEL_EXAMPLES", 150)),
                                           stateful_step_count=40, deadline=None,
                                           suppress_health_check=[HealthCheck.too_slow])
test_ordering_model_across_resizes = AcrossResizes.TestCase
