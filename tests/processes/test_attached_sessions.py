"""A process attached to the JVM (log_store.session.attach) must not change which session the
host's threads run Delta with: Spark falls back to the JVM's default session in a thread without
an active one, and some of Delta's paths refuse to run without an active one at all."""

from __future__ import annotations

import subprocess
import sys
import threading

from log_store.session import activate, gateway_of
from tests.support import PROJECT

ATTACH = ("import sys; sys.path.insert(0, sys.argv[2]); from log_store.session import attach; "
          "attach(sys.argv[1]).sql('select 1').collect()")


def _in_a_new_thread(fn):
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


def test_an_attached_process_leaves_the_hosts_default_session_alone(spark):
    jclass = spark._jvm.org.apache.spark.sql.SparkSession
    subprocess.run([sys.executable, "-c", ATTACH, gateway_of(spark), str(PROJECT)], check=True, timeout=120)
    default = jclass.getDefaultSession()
    assert default.isDefined() and default.get().equals(spark._jsparkSession)


def test_a_thread_that_activates_the_session_runs_with_it(spark):
    jclass = spark._jvm.org.apache.spark.sql.SparkSession

    def active_is_ours() -> bool:
        activate(spark)
        got = jclass.getActiveSession()
        return got.isDefined() and got.get().equals(spark._jsparkSession)

    assert _in_a_new_thread(active_is_ours)
