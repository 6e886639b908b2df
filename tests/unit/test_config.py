"""Configuration errors name the key and say what to do (no Spark)."""

import pytest

from jobs.config import load_config
from log_store.errors import InvalidConfigurationError


def test_default_config_is_local(monkeypatch):
    monkeypatch.delenv("LAKELOG_ROOT", raising=False)
    monkeypatch.delenv("LAKELOG_CONF", raising=False)
    cfg = load_config()
    assert cfg.spark.mode == "local" and cfg.root == "./lakelog-data"


def test_root_override_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LAKELOG_ROOT", str(tmp_path))
    assert load_config().root == str(tmp_path)


def test_invalid_value_names_the_key(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("producer:\n  batch_size: -3\n")
    with pytest.raises(InvalidConfigurationError, match=r"key 'producer.batch_size'"):
        load_config(f)


def test_unknown_key_is_named(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("spark:\n  mastr: local[1]\n")
    with pytest.raises(InvalidConfigurationError, match=r"key 'spark.mastr'"):
        load_config(f)


def test_unknown_spark_mode(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("spark:\n  mode: yarnish\n")
    with pytest.raises(InvalidConfigurationError, match=r"key 'spark.mode'"):
        load_config(f)


def test_not_yaml_and_missing_file(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("root: [unclosed\n")
    with pytest.raises(InvalidConfigurationError, match="not valid YAML"):
        load_config(f)
    with pytest.raises(InvalidConfigurationError, match="cannot read configuration file"):
        load_config(tmp_path / "missing.yaml")


def test_missing_delta_jars_say_what_to_run(tmp_path):
    from log_store.config import SparkSettings
    from log_store.errors import SetupError
    from log_store.session import local_delta_jars

    with pytest.raises(SetupError, match="make setup"):
        local_delta_jars(SparkSettings(jars_dir=str(tmp_path)))
    (tmp_path / "delta-spark_2.12-3.3.2.jar").write_bytes(b"")  # jars left from another Spark line
    with pytest.raises(SetupError, match=r"built for another Spark.*make setup"):
        local_delta_jars(SparkSettings(jars_dir=str(tmp_path)))


def test_a_missing_lakelog_jar_says_what_to_run_unless_delta_s_store_is_chosen(tmp_path):
    import pyspark

    from log_store.config import SparkSettings
    from log_store.errors import SetupError
    from log_store.session import local_delta_jars

    line = ".".join(pyspark.__version__.split(".")[:2])
    (tmp_path / f"delta-spark_{line}_2.13-4.4.0.jar").write_bytes(b"")
    with pytest.raises(SetupError, match=r"lakelog-jvm.jar is missing.*log store.*make setup.*log_store: delta"):
        local_delta_jars(SparkSettings(jars_dir=str(tmp_path)))
    assert local_delta_jars(SparkSettings(jars_dir=str(tmp_path), log_store="delta"))
    (tmp_path / "lakelog-jvm.jar").write_bytes(b"")
    assert len(local_delta_jars(SparkSettings(jars_dir=str(tmp_path)))) == 2


def test_a_cluster_session_takes_deltas_package_and_refuses_to_start_without_lakelogs_jar(tmp_path):
    """Cluster mode fetches Delta's package on the cluster and ships lakelog's jar (its log store)
    with the job: without the jar the session refuses to start unless Delta's store is chosen."""
    from log_store.config import SparkSettings
    from log_store.errors import SetupError
    from log_store.session import session_conf

    cluster = SparkSettings(mode="cluster", master="spark://cluster:7077", jars_dir=str(tmp_path))
    with pytest.raises(SetupError, match=r"lakelog-jvm.jar is missing.*make setup.*log_store: delta"):
        session_conf(cluster)
    _master, conf = session_conf(cluster.model_copy(update={"log_store": "delta"}))
    assert "spark.jars" not in conf and conf["spark.jars.packages"].startswith("io.delta:delta-spark_4.2_2.13:")
    (tmp_path / "lakelog-jvm.jar").write_bytes(b"")
    master, conf = session_conf(cluster)
    assert master == "spark://cluster:7077" and conf["spark.jars"] == str(tmp_path / "lakelog-jvm.jar")


def test_commits_go_through_lakelogs_log_store_for_local_disks_and_s3a():
    from log_store.config import SparkSettings
    from log_store.session import CHECKPOINT_MANAGER_CLASS, CHECKPOINT_MANAGER_CONF, LOG_STORE_CLASS, S3A_CLASS, log_store_conf

    store = {"spark.delta.logStore.file.impl": LOG_STORE_CLASS, "spark.delta.logStore.s3a.impl": LOG_STORE_CLASS,
             CHECKPOINT_MANAGER_CONF: CHECKPOINT_MANAGER_CLASS}
    assert log_store_conf(SparkSettings(), {}) == store
    mapped = {"spark.hadoop.fs.s3.impl": S3A_CLASS}
    assert log_store_conf(SparkSettings(), mapped) == store | {"spark.delta.logStore.s3.impl": LOG_STORE_CLASS}
    emrfs = SparkSettings(conf={"spark.hadoop.fs.s3.impl": "com.amazon.ws.emr.hadoop.fs.EmrFileSystem"})
    assert log_store_conf(emrfs, mapped) == store, "s3:// that is not S3A keeps the cluster's store"
    assert log_store_conf(SparkSettings(log_store="delta"), mapped) == {}


def test_spark_profile_from_environment_and_bad_profile(monkeypatch):
    monkeypatch.delenv("LAKELOG_CONF", raising=False)
    monkeypatch.setenv("LAKELOG_SPARK_PROFILE", "small")
    assert load_config().spark.profile == "small"
    monkeypatch.setenv("LAKELOG_SPARK_PROFILE", "tiny")
    with pytest.raises(InvalidConfigurationError, match=r"key 'spark.profile'"):
        load_config()


@pytest.mark.parametrize("name", ["local.yaml", "cluster.yaml", "databricks.yaml", "s3.yaml"])
def test_every_shipped_configuration_file_loads(name):
    from jobs.config import CONF_DIR

    config = load_config(CONF_DIR / name)
    assert config.root and config.spark.mode in ("local", "cluster", "databricks")
