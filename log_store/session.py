"""The one place that decides how a Spark session with Delta is built.

local: Delta jars resolved by ``make setup`` into ``.jars/``; cluster: ``spark.jars.packages``;
databricks: Delta is built in, nothing is added. Outside Databricks, Delta's commit files are
written by lakelog's log store (``log_store_conf``).
"""

from __future__ import annotations

import logging

import os
import shutil
import threading
import sys
from pathlib import Path

from pyspark.sql import SparkSession


from log_store.config import PROJECT_ROOT, SparkSettings
from log_store.delta_classes import INTERNALS_CONF, forget_session, jvm_json
from log_store.errors import InvalidConfigurationError, SetupError

# Small-table settings: few shuffle partitions, no UI, tiny snapshot reconstruction.
_BASE_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "4",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
    "spark.databricks.delta.stalenessLimit": "0",
    # Keep application transaction ids (log ends, producer sequences) in the .crc file, so the
    # fenced append reads them without reconstructing table state.
    "spark.databricks.delta.setTransactionsInCrc.writeOnCommit": "true",
    # ... up to 1,000 of them (Delta's default, 100, is passed by 64 partitions and a few producers).
    "spark.databricks.delta.setTransactionsInCrc.maxAllowed": "1000",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.driver.memory": "4g",
    "spark.sql.session.timeZone": "UTC",
}

# The "small" profile (see SparkSettings.profile): measured in BENCHMARKS.md.
_SMALL_CONF = {
    "spark.driver.memory": "1g",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:CICompilerCount=1",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.shuffle.partitions": "1",
    "spark.default.parallelism": "1",
}
_SMALL_MASTER = "local[1]"


# lakelog's log store (log_store/jvm, lakelog.storage): put-if-absent commits across processes.
LOG_STORE_CLASS = "lakelog.storage.PutIfAbsentLogStore"
# ... and its checkpoint file manager, which writes the files of a local table's _delta_log that
# Delta writes through one (each commit's .crc) itself: Hadoop's local file system starts about ten
# processes for each (chmod, readlink). Other files are Spark's.
CHECKPOINT_MANAGER_CLASS = "lakelog.storage.LocalCheckpointFileManager"
CHECKPOINT_MANAGER_CONF = "spark.sql.streaming.checkpointFileManagerClass"
JVM_JAR = "lakelog-jvm.jar"
S3A_CLASS = "org.apache.hadoop.fs.s3a.S3AFileSystem"


def log_store_conf(settings: SparkSettings, conf: dict[str, str]) -> dict[str, str]:
    """The Spark settings that make Delta commit through lakelog's log store: for ``file:`` and
    ``s3a:``, and for ``s3:`` where it is S3A (local mode maps it so; a cluster keeps its own
    ``fs.s3.impl``). Settings the user gives (``spark.conf``) win."""
    if settings.log_store != "lakelog":
        return {}
    out = {"spark.delta.logStore.file.impl": LOG_STORE_CLASS, "spark.delta.logStore.s3a.impl": LOG_STORE_CLASS,
           CHECKPOINT_MANAGER_CONF: CHECKPOINT_MANAGER_CLASS}
    s3_impl = settings.conf.get("spark.hadoop.fs.s3.impl") or conf.get("spark.hadoop.fs.s3.impl")
    if s3_impl == S3A_CLASS:
        out["spark.delta.logStore.s3.impl"] = LOG_STORE_CLASS
    return out


def _jars_folder(settings: SparkSettings) -> Path:
    folder = Path(settings.jars_dir)
    return folder if folder.is_absolute() else PROJECT_ROOT / folder


def _lakelog_jar(settings: SparkSettings) -> str:
    """lakelog's own jar, which the log store needs; a SetupError saying how to build it."""
    jar = _jars_folder(settings) / JVM_JAR
    if not jar.is_file():
        raise SetupError(
            f"lakelog's jar {jar} is missing: it holds the log store that makes commits safe across processes. "
            "Run `make setup` (builds log_store/jvm with Maven), or set spark.log_store: delta to use Delta's "
            "own store (not safe for concurrent writers on a local disk or S3: docs/operating.md)")
    return str(jar)


def local_delta_jars(settings: SparkSettings) -> list[str]:
    """The jars ``make setup`` put in place (Delta's, built for this PySpark's Spark line, and
    lakelog's JVM functions), or a SetupError saying how to get them."""
    import pyspark

    folder = _jars_folder(settings)
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    line = ".".join(pyspark.__version__.split(".")[:2])
    if not any(f"delta-spark_{line}_2.13" in j for j in jars):
        found = [Path(j).name for j in jars if "delta-spark" in j]
        raise SetupError(
            f"Delta's jars for Spark {line} are missing from {folder}"
            + (f" (found {', '.join(found)}, built for another Spark)" if found else "")
            + ". Run `make setup` (needs Maven: `apt-get install maven`) to fetch them from Maven Central."
        )
    if settings.log_store == "lakelog":
        _lakelog_jar(settings)
    return jars


def _check_java() -> None:
    home = os.environ.get("JAVA_HOME")
    if home and not os.access(Path(home) / "bin" / "java", os.X_OK):
        raise SetupError(f"JAVA_HOME={home} has no bin/java; point it at a Java 17 installation or unset it "
                         "to use the java on PATH.")
    if not (home or shutil.which("java")):
        raise SetupError("Java is not installed; Spark needs Java 17: `apt-get install openjdk-17-jre-headless`.")


def _get_or_create(builder: SparkSession.Builder) -> SparkSession:
    """The session; a JVM that does not start is a set-up error that says what to check, not a traceback."""
    from pyspark.errors import PySparkRuntimeError

    try:
        return builder.getOrCreate()
    except PySparkRuntimeError as exc:
        if "JAVA_GATEWAY_EXITED" not in str(exc):
            raise
        raise SetupError("Spark's JVM exited before it started: check that JAVA_HOME, or the java on PATH, is a "
                         "working Java 17 (what it printed, if anything, is above).") from exc


def session_conf(settings: SparkSettings) -> tuple[str | None, dict[str, str]]:
    """The master and Spark settings a session of ``settings`` starts with (local or cluster mode):
    for a session in this process, and for a Spark Connect server started with the same jars."""
    _check_java()
    conf = {**_BASE_CONF, INTERNALS_CONF: settings.delta_internals}
    if settings.mode == "local":
        jars = local_delta_jars(settings)
        conf["spark.jars"] = ",".join(jars)
        # Executors started by a standalone master read jars from the same paths.
        conf["spark.driver.extraClassPath"] = os.pathsep.join(jars)
        conf["spark.executor.extraClassPath"] = os.pathsep.join(jars)
        # Python workers must use this interpreter (it has lakelog's dependencies).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        conf["spark.pyspark.python"] = os.environ["PYSPARK_PYTHON"]
        # s3:// as S3A (its jars come with make setup), as clusters outside AWS's own map it.
        conf["spark.hadoop.fs.s3.impl"] = S3A_CLASS
    else:
        conf["spark.jars.packages"] = ",".join(settings.packages)
        if settings.log_store == "lakelog":
            conf["spark.jars"] = _lakelog_jar(settings)
    conf.update(log_store_conf(settings, conf))
    master = settings.master
    if settings.profile == "small":
        conf.update(_SMALL_CONF)
        master = _SMALL_MASTER if master and master.startswith("local") else master
    if settings.quiet and settings.mode == "local":
        quiet = f"-Dlog4j2.configurationFile={PROJECT_ROOT / 'conf' / 'log4j2-quiet.properties'}"
        conf["spark.driver.extraJavaOptions"] = " ".join(filter(None, [conf.get("spark.driver.extraJavaOptions"), quiet]))
    conf.update(settings.conf)
    return master, conf


REMOTE_ENV = "SPARK_REMOTE"  # PySpark's: the Connect server a session is built on
REMOTE_TIMEOUT_S = 15.0


def remote_url(settings: SparkSettings) -> str | None:
    """The Spark Connect server a session of ``settings`` is built on: ``settings.remote``, else
    ``$SPARK_REMOTE`` (as PySpark takes it); None for a session in this process, and on Databricks
    for the runtime's own session, whichever kind it is."""
    if settings.remote:
        return settings.remote
    return None if settings.mode == "databricks" else os.environ.get(REMOTE_ENV) or None


def check_reachable(url: str, timeout: float = REMOTE_TIMEOUT_S) -> None:
    """A SetupError now if no Spark Connect server answers at ``url``, instead of PySpark's
    retries of the first query (about ten minutes) and a gRPC traceback."""
    import grpc
    from pyspark.errors import PySparkValueError
    from pyspark.sql.connect.client import DefaultChannelBuilder

    try:
        channel = DefaultChannelBuilder(url).toChannel()
    except PySparkValueError as exc:
        raise InvalidConfigurationError(
            f"{url!r} is no Spark Connect URL ({exc}): give "
            "sc://host:port (parameters after /;, as in sc://host:443/;token=...) to --remote, SPARK_REMOTE or spark.remote"
        ) from None
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
    except grpc.FutureTimeoutError:
        raise SetupError(
            f"no Spark Connect server answers at {url} (waited {timeout:g} s): start the server (a local one: "
            "`python -m log_store.connect_server run lakelog ...`), or correct the URL given by --remote, "
            "SPARK_REMOTE or spark.remote, or unset them to run Spark in this process") from None
    finally:
        channel.close()


def build_session(settings: SparkSettings) -> SparkSession:
    """Return the active session (or build one) configured for Delta per ``settings.mode``; with
    ``settings.remote`` (or ``$SPARK_REMOTE``), a Spark Connect session on that server (whose own
    settings hold Delta)."""
    builder = SparkSession.builder.appName(settings.app_name)
    remote = remote_url(settings)
    if remote:
        check_reachable(remote)
        builder = builder.remote(remote)
        for key, value in settings.conf.items():  # session settings; the server keeps its own jars
            builder = builder.config(key, value)
        # A new session (PySpark's getOrCreate refuses one beside a classic session in the process)
        return builder.create()
    if settings.mode == "databricks":
        spark = builder.getOrCreate()
        if is_connect(spark):  # serverless, standard access mode: no JVM of Delta's to look into
            return spark
        spark.conf.set(INTERNALS_CONF, settings.delta_internals)
        forget_session(spark)  # Delta's classes looked up again with the setting
        return spark
    master, conf = session_conf(settings)
    if master:
        builder = builder.master(master)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = _get_or_create(builder)
    spark.sparkContext.setLogLevel("ERROR")
    if settings.quiet:  # PySpark logs each SQL error as JSON on stderr; the CLI states it once itself
        from pyspark.logger import PySparkLogger

        PySparkLogger.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    return spark


def is_connect(spark) -> bool:
    """Whether ``spark`` (a session, a ``LazySession``, or a DataFrame or Observation of one) is of
    Spark Connect, a client without the driver's JVM: the public DataFrame and SQL APIs only. Asked
    of the object, not of the process (``pyspark.sql.utils.is_remote``), which may hold both kinds."""
    if isinstance(spark, LazySession):
        spark = spark.session()
    return type(spark).__module__.startswith("pyspark.sql.connect.")


NO_JVM_ENV = "LAKELOG_NO_JVM"


class LazySession:
    """A Spark session built the first time something of it is used: commands and a server whose
    commits and reads go through delta-rs never start a JVM. With ``LAKELOG_NO_JVM=1`` in the
    environment, a use is an error naming what needed Spark (how the tests show that a command
    runs without a JVM)."""

    def __init__(self, build, conf: dict[str, str] | None = None) -> None:
        self._build = build
        self.conf_given = dict(conf or {})  # the Spark settings it will be built with
        self._session: SparkSession | None = None
        self._lock = threading.Lock()
        self._threads = threading.local()  # whether this thread made the session its active one

    @property
    def started(self) -> bool:
        return self._session is not None

    def session(self) -> SparkSession:
        """The session, built on first use (once, whichever thread asks first), and made the
        active one of each thread that uses it (``activate``: thread pools started before it)."""
        if self._session is None:
            with self._lock:
                if self._session is None:
                    if os.environ.get(NO_JVM_ENV) == "1":
                        import traceback

                        where = "".join(traceback.format_stack(limit=14)[:-2])
                        raise SetupError(f"{NO_JVM_ENV}=1, and this needs a Spark session (a JVM); called from:\n{where}")
                    self._session = self._build()
        if not getattr(self._threads, "active", False):
            self._threads.active = True
            activate(self._session)
        return self._session

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.session(), name)


def gateway_of(spark: SparkSession) -> str | None:
    """``port:secret`` of the py4j gateway this Python process drives ``spark``'s JVM through,
    for ``attach``; None where there is none (Spark Connect)."""
    if is_connect(spark):
        return None
    gateway = getattr(spark.sparkContext, "_gateway", None)
    if gateway is None:
        return None
    params = gateway.gateway_parameters
    return f"{params.port}:{params.auth_token}"


def hadoop_settings(spark: SparkSession, prefix: str) -> dict[str, str]:
    """The session's Hadoop settings whose keys start with ``prefix`` (without it), e.g. S3A's
    ``fs.s3a.``. On Spark Connect, where the driver's JVM is out of reach, the session's
    ``spark.hadoop.*`` settings (what Spark makes Hadoop settings of), as far as the server shows them."""
    if is_connect(spark):
        try:
            found = spark.conf.getAll
        except Exception:  # noqa: BLE001 - a server that lists no settings: lakelog's configuration then
            return {}
        return _with_prefix(found, f"spark.hadoop.{prefix}")
    if getattr(spark.sparkContext, "_jsc", None) is None:
        return {}
    props = spark._jsc.hadoopConfiguration().getPropsWithPrefix(prefix)
    return {str(k): str(v) for k, v in jvm_json(spark, props).items()}


def _with_prefix(settings: dict[str, str], prefix: str) -> dict[str, str]:
    return {k[len(prefix):]: str(v) for k, v in settings.items() if k.startswith(prefix)}


def s3a_settings(spark) -> dict[str, str]:
    """S3A's settings (``fs.s3a.*``, without the prefix) of ``spark``: those lakelog's configuration
    gives a ``LazySession`` (``spark.hadoop.fs.s3a.*``; all there is before it starts, so a commit
    to S3 through delta-rs starts no JVM), under the running session's own."""
    given = _with_prefix(spark.conf_given, "spark.hadoop.fs.s3a.") if isinstance(spark, LazySession) else {}
    if isinstance(spark, LazySession) and not spark.started:
        return given
    return {**given, **hadoop_settings(spark, "fs.s3a.")}


ROOT_CONF = "lakelog.root"  # lakelog.spark.Bridge.ROOT_CONF: the session's default root for format("lakelog")


def install_format_side(spark: SparkSession, side, root: str | None) -> bool:
    """Make ``side`` (a py4j callback object implementing ``lakelog.spark.PythonSide``) serve
    ``format("lakelog")`` in ``spark``'s JVM, and ``root`` the session's default root. py4j calls
    back one Python process per JVM: a side another live process installed is kept (a process
    attached to a JVM another one drives uses it); else this process's callback server starts and
    py4j is pointed at it. True if ``side`` serves now."""
    from py4j.java_gateway import JavaObject
    from pyspark.java_gateway import ensure_callback_server_started

    if root:
        spark.conf.set(ROOT_CONF, root)
    else:
        spark.conf.unset(ROOT_CONF)
    bridge = spark._jvm.lakelog.spark.Bridge
    if bridge.serving():
        return False
    gateway = spark.sparkContext._gateway
    ensure_callback_server_started(gateway)
    server = JavaObject("GATEWAY_SERVER", gateway._gateway_client)
    server.resetCallbackClient(server.getCallbackClient().getAddress(), gateway._python_proxy_port)
    return bool(bridge.install(side))


def activate(spark: SparkSession) -> None:
    """Make ``spark`` (if any) the active session of the JVM thread behind the calling Python thread.

    Spark keeps the active session per JVM thread; a thread without one falls back to the JVM's
    default session, which is whichever session a process last attached (``attach``) or built,
    with that session's SQL conf. Some of Delta's paths read only the thread's own active session
    and fail with DELTA_SPARK_SESSION_NOT_SET. So every thread lakelog starts to talk to Delta
    (a server's pool, a heartbeat thread) calls this first. No-op on Spark Connect, and for a
    ``LazySession`` not started (when it starts, it is the JVM's default session)."""
    if isinstance(spark, LazySession):
        if not spark.started:
            return
        spark = spark.session()
    jvm = getattr(spark, "_jvm", None)
    if jvm is not None and getattr(spark, "_jsparkSession", None) is not None:
        jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)


_ATTACHED: dict[str, SparkSession] = {}


def attach(gateway: str) -> SparkSession:
    """A Spark session (``newSession``: its own SQL conf and temporary views) on the running JVM
    whose py4j gateway is ``gateway`` (``port:secret``, see ``gateway_of``), from another Python
    process: about 0.4 s instead of starting a JVM. One per gateway and process, made on the
    first call: a stream's driver-side worker commits every micro-batch through it."""
    if gateway in _ATTACHED:
        return _ATTACHED[gateway]
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._active_spark_context is not None:  # attached before, in this process
        sc = SparkContext._active_spark_context
    else:
        port, secret = gateway.split(":", 1)
        os.environ["PYSPARK_GATEWAY_PORT"] = port
        os.environ["PYSPARK_GATEWAY_SECRET"] = secret
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        gw = launch_gateway()
        jvm = gw.jvm
        jsc = jvm.org.apache.spark.api.java.JavaSparkContext.fromSparkContext(jvm.org.apache.spark.SparkContext.getOrCreate())
        sc = SparkContext(gateway=gw, jsc=jsc)
    jclass = sc._jvm.org.apache.spark.sql.SparkSession
    # PySpark makes the first session a process constructs the JVM's default; the host's threads
    # without an active session of their own would then run with this process's SQL conf. Reading
    # the default and setting it back races other attaching processes (one may give back
    # another's): the attached session never becomes the default at all.
    should_update = SparkSession._should_update_active_session
    SparkSession._should_update_active_session = staticmethod(lambda: False)
    try:
        session = SparkSession(sc, jsparkSession=jclass.builder().getOrCreate().newSession())
    finally:
        SparkSession._should_update_active_session = should_update
    SparkSession._instantiatedSession = SparkSession._activeSession = session
    activate(session)
    _ATTACHED[gateway] = session
    return session
