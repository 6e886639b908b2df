"""The engine facade's reads of Delta's JVM objects (as JSON, in one call each) give exactly
what the table holds: checked against delta-rs, a reader that shares none of that code."""

from __future__ import annotations

import deltalake
from pyspark.sql import functions as F

from log_store import rs_reader
from log_store.engine import DeltaTransaction, app_version_changes


def _table(spark, path: str) -> None:
    (spark.range(0, 10).select(F.col("id").cast("int").alias("p"), F.col("id").alias("v"))
     .write.format("delta").partitionBy("p").save(path))
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('lakelog.x' = 'a=b, \"c\"', 'lakelog.n' = '7')")


def test_properties_app_versions_and_written_files_match_the_table(spark, tmp_path):
    path = str(tmp_path / "t")
    _table(spark, path)
    conf = DeltaTransaction.start(spark, path).configuration()
    assert conf["lakelog.x"] == 'a=b, "c"' and conf["lakelog.n"] == "7"
    assert {k: v for k, v in conf.items()} == dict(deltalake.DeltaTable(path).metadata().configuration)

    txn = DeltaTransaction.start(spark, path)
    files = txn.write(spark.range(0, 6).select((F.col("id") % 3).cast("int").alias("p"), F.col("id").alias("v")))
    assert {f.partition_values["p"] for f in files} == {"0", "1", "2"}
    assert sum(f.num_records for f in files) == 6
    in_two = [f for f in files if f.partition_values["p"] == "2"]  # rows 2 and 5, maybe in two tasks' files
    assert min(f.min_values["v"] for f in in_two) == 2 and max(f.max_values["v"] for f in in_two) == 5
    version = txn.commit({"lakelog.test.a": 3, "other.b": 9})
    txn = DeltaTransaction.start(spark, path)
    txn.commit({"lakelog.test.a": 4})

    known = DeltaTransaction.start(spark, path).snapshot_app_versions()
    assert known == {"lakelog.test.a": 4, "other.b": 9}
    # the same from the reconstructed state (tables whose checksum lacks set transactions)
    fallback = DeltaTransaction.start(spark, path)
    fallback._from_checksum = lambda: None
    assert fallback.snapshot_app_versions() == known

    # set transactions committed after a version, as lakelog's heartbeats read them: JVM and delta-rs agree
    jvm = app_version_changes(spark, path, version - 1, "lakelog.test.")
    rs = rs_reader.app_version_changes(path, version - 1, "lakelog.test.")
    assert jvm == rs
    assert jvm["lakelog.test.a"][0] == 4 and jvm["lakelog.test.a"][1] is not None
    assert app_version_changes(spark, path, version, "other.") == {}
    assert app_version_changes(spark, path, version - 1, "other.")["other.b"][0] == 9
    # the fallback's set transactions carried on through the commit files (log_store.app_versions), never rebuilt
    txn = DeltaTransaction.start(spark, path)
    txn.commit({"lakelog.test.a": 5, "lakelog.test.c": 1})
    carried = DeltaTransaction.start(spark, path)
    carried._from_checksum = lambda: None
    carried.jtxn.snapshot = None  # the Spark job's way would fail: not taken
    assert carried.snapshot_app_versions() == {"lakelog.test.a": 5, "lakelog.test.c": 1, "other.b": 9}


def test_commits_go_through_lakelogs_log_store_which_refuses_a_version_that_exists(spark, tmp_path):
    """The session's Delta writes commit files with lakelog.storage.PutIfAbsentLogStore; a write
    of a version that exists fails as Delta expects of a lost race and leaves the file as it was,
    and no temporary file stays behind."""
    import pytest
    from py4j.protocol import Py4JJavaError

    from log_store.delta_classes import delta
    from log_store.session import LOG_STORE_CLASS

    path = str(tmp_path / "t")
    _table(spark, path)
    jvm = spark._jvm
    log = delta(spark).DeltaLog.forTable(spark._jsparkSession, path)
    commit = jvm.org.apache.hadoop.fs.Path(f"file:{path}/_delta_log/{1:020d}.json")
    assert log.store().getDelegate(commit).logStoreImpl().getClass().getName() == LOG_STORE_CLASS
    before = (tmp_path / "t" / "_delta_log" / f"{1:020d}.json").read_bytes()
    lines = jvm.java.util.ArrayList()
    lines.add('{"commitInfo":{}}')
    with pytest.raises(Py4JJavaError, match="java.nio.file.FileAlreadyExistsException"):
        log.store().write(commit, jvm.scala.jdk.CollectionConverters.IteratorHasAsScala(lines.iterator()).asScala(),
                          False, log.newDeltaHadoopConf())
    assert (tmp_path / "t" / "_delta_log" / f"{1:020d}.json").read_bytes() == before
    assert not [p.name for p in (tmp_path / "t" / "_delta_log").iterdir() if p.name.endswith(".tmp")]


def test_a_commit_to_a_table_whose_folder_is_gone_writes_nothing_and_is_a_storage_error(spark, tmp_path):
    """The table's folder went away between the transaction's read and its commit (its root lost or
    unmounted): the commit fails as a StorageError, which writers wait out on a replicated topic,
    and nothing is made where the table was (no new log of one version)."""
    import os

    import pytest

    from log_store.errors import StorageError

    path = str(tmp_path / "t")
    _table(spark, path)
    txn = DeltaTransaction.start(spark, path)
    os.rename(path, path + ".away")
    with pytest.raises(StorageError, match="log folder is not there"):
        txn.commit({"lakelog.test": 1})
    assert not os.path.exists(path), os.listdir(path)


def test_s3s_lost_race_is_recognised_by_its_status_not_by_412_anywhere_in_a_message(spark):
    """S3A reports S3's 412 as RemoteFileChangedException over the SDK's S3Exception; a message
    that merely holds 412 (a commit file's name) is not a lost race."""
    jvm = spark._jvm
    publisher = jvm.lakelog.storage.S3Publisher
    io = jvm.java.io.IOException
    assert not publisher.isExistsFailure(io("s3a://b/t/_delta_log/00000000000000000412.json: Connection reset"))
    assert not publisher.isExistsFailure(io("uploaded 412 bytes to 00000000000000004120.json"))
    s3 = jvm.software.amazon.awssdk.services.s3.model.S3Exception.builder().statusCode(412).message("x").build()
    assert publisher.isExistsFailure(io("put failed", s3)), "the SDK's status code"
    assert publisher.isExistsFailure(io("At least one of the pre-conditions you specified did not hold "
                                        "(Service: S3, Status Code: 412, Request ID: 1)"))
    assert publisher.isExistsFailure(jvm.org.apache.hadoop.fs.FileAlreadyExistsException("s3a://b/k"))


def test_a_commit_without_a_txn_id_is_refused_on_s3_before_it_is_written(spark):
    """A 412 for an object holding the same bytes counts as this write (its answer was lost); that
    needs every commit's bytes to be its own, which Delta's commitInfo txnId makes them."""
    import pytest
    from py4j.protocol import Py4JJavaError

    jvm = spark._jvm
    publisher = jvm.lakelog.storage.S3Publisher
    commit = jvm.org.apache.hadoop.fs.Path(f"s3a://b/t/_delta_log/{7:020d}.json")
    mine = b'{"commitInfo":{"operation":"WRITE","txnId":"a79b3f28-ee65-4435-b9c0-38dbbe11417d"}}\n{"add":{}}\n'
    publisher.checkUnique(commit, mine)
    with pytest.raises(Py4JJavaError, match="carries no Delta commitInfo with a txnId"):
        publisher.checkUnique(commit, b'{"commitInfo":{"operation":"WRITE"}}\n{"add":{}}\n')
    publisher.checkUnique(jvm.org.apache.hadoop.fs.Path(f"s3a://b/t/_delta_log/{7:020d}.crc"), b'{"numFiles":1}')


def test_checksums_in_a_local_log_are_written_put_if_absent_and_whole_other_files_by_sparks_manager(spark, tmp_path):
    """The session's checkpoint file manager (what Delta writes each commit's .crc with) is
    lakelog.storage.LocalCheckpointFileManager: in a local _delta_log a file not to be overwritten
    is refused when it exists and left as it was, an overwrite replaces it, a cancelled write leaves
    nothing, and no temporary file stays; outside a _delta_log it is Spark's manager that writes."""
    import pytest
    from py4j.protocol import Py4JJavaError

    from log_store.delta_classes import delta
    from log_store.session import CHECKPOINT_MANAGER_CLASS

    path = str(tmp_path / "t")
    _table(spark, path)
    jvm = spark._jvm
    folder = tmp_path / "t" / "_delta_log"
    assert sorted(p.name for p in folder.glob("*.crc")) == [f"{v:020d}.crc" for v in range(2)]
    conf = delta(spark).DeltaLog.forTable(spark._jsparkSession, path).newDeltaHadoopConf()
    files = getattr(jvm.org.apache.spark.sql.execution.streaming.checkpointing, "CheckpointFileManager$")
    manager = getattr(files, "MODULE$").create(jvm.org.apache.hadoop.fs.Path(f"file:{folder}"), conf)
    assert manager.getClass().getName() == CHECKPOINT_MANAGER_CLASS

    def write(target, data: bytes, overwrite: bool, cancel: bool = False) -> None:
        out = manager.createAtomic(jvm.org.apache.hadoop.fs.Path(f"file:{target}"), overwrite)
        out.write(bytearray(data))
        out.cancel() if cancel else out.close()

    crc = folder / f"{1:020d}.crc"
    before = crc.read_bytes()
    with pytest.raises(Py4JJavaError, match="FileAlreadyExistsException"):
        write(crc, b'{"other": 1}', overwrite=False)
    assert crc.read_bytes() == before
    write(folder / "new.crc", b"first", overwrite=False)
    write(folder / "new.crc", b"second", overwrite=True)
    assert (folder / "new.crc").read_bytes() == b"second"
    write(folder / "cancelled.crc", b"never", overwrite=False, cancel=True)
    assert not (folder / "cancelled.crc").exists()
    assert not list(folder.rglob("*.tmp"))

    elsewhere = tmp_path / "checkpoint" / "offsets"  # a streaming checkpoint's folder: listed by Spark's readers
    elsewhere.mkdir(parents=True)
    write(elsewhere / "0", b"v1", overwrite=False)
    assert (elsewhere / "0").read_bytes() == b"v1"
    assert sorted(p.name for p in elsewhere.iterdir() if not p.name.endswith(".crc")) == ["0"]
