"""Every named crash point (log_store/crash.py) has a scenario in the campaign's crash-point run
(chaos/crashpoints.py), which would otherwise stop at it with a KeyError."""

from chaos.crashpoints import SCENARIOS
from log_store.crash import POINTS


def test_every_crash_point_has_a_scenario():
    missing = sorted(p for p in POINTS if p.split(":")[0] not in SCENARIOS)
    assert missing == [], f"crash points without a scenario in chaos/crashpoints.py: {missing}"
