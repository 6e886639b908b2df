"""The root a ``format("lakelog")`` read or write uses, decided on the driver from its options and
the session's default (``pipelines.spark.register``)."""

from __future__ import annotations

from log_store import rs_reader
from log_store.errors import InvalidConfigurationError
from log_store.files import is_remote, local_path
from log_store.object_store import is_s3, storage_from_s3a
from pipelines.spark.options import ROOT


def resolve_root(given: str | None, default: str | None, writing: bool = False) -> str:
    """The root a read or write uses: the ``root`` option, else the one registered as default.
    A local path is made absolute here, on the driver: Spark's workers may run elsewhere. A URI
    must name an object store delta-rs reads: both sides of a read open the root with it. Writes
    take local and S3 roots: their tasks stage rows with pyarrow, which lakelog points at S3
    (``log_store.object_store``), and the driver commits them through Spark's S3A."""
    root = given or default
    if not root:
        raise InvalidConfigurationError(
            f"no lakelog root: give .option('{ROOT}', PATH_OR_URI), or register the source with a default "
            "root (pipelines.spark.register(spark, root))")
    if not is_remote(root):
        return str(local_path(root))
    if writing and not is_s3(root):
        raise InvalidConfigurationError(
            f"root {root!r}: format('lakelog') writes to local and S3 roots (s3://, s3a://): its tasks stage rows "
            "with pyarrow, which lakelog points only at those; produce with pipelines.producer.Producer in a "
            "Spark session configured for the store")
    scheme = root.split(":", 1)[0].lower()
    if scheme == "dbfs":
        raise InvalidConfigurationError(
            f"root {root!r}: format('lakelog') reads with delta-rs, which cannot open Databricks' dbfs:/ paths; "
            "give the object store URI the path is mounted from (s3://, abfss://, gs://) or the local "
            "/dbfs/... path of the same folder")
    if scheme not in rs_reader.SCHEMES:
        raise InvalidConfigurationError(
            f"root {root!r}: format('lakelog') reads with delta-rs, which does not open {scheme}:// here; "
            f"give a local path or a URI with one of {', '.join(s + '://' for s in rs_reader.SCHEMES)}")
    return root.rstrip("/")


def read_storage(root: str, s3a: dict[str, str], given: dict[str, str]) -> dict[str, str]:
    """delta-rs storage options for a read of ``root``: the read's ``storage.*`` options
    (``given``) over what S3A's settings (``s3a``: ``fs.s3a.*`` without the prefix) say for an S3
    root; an option given either way wins whole (keys compared lower-cased)."""
    derived = storage_from_s3a(s3a, root)
    given_keys = {k.lower() for k in given}
    return {**{k: v for k, v in derived.items() if k not in given_keys}, **given}
