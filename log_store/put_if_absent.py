"""Whether an object store gives delta-rs the put-if-absent its commits rely on.

delta-rs commits a version by creating its commit file only if no such file exists: on S3 a
``PUT`` with ``If-None-Match: *`` (object_store's ``PutMode::Create``). An S3-compatible store that
ignores the header lets a second writer of a version replace the first, and an acknowledged commit
is lost without an error. So before the first commit to an S3 endpoint, a process probes it with
the same library (``obstore``: object_store's Python binding, configured from the same storage
options): a scratch object created twice, which the store must refuse the second time, then
removed. A store that takes both is refused with ``StorageError`` before any commit of lakelog's.
The answer is kept per endpoint and bucket for the process's life.

GCS and ADLS Gen2 need no probe: object_store creates a file there with the services' own
create-only conditions (``ifGenerationMatch=0``, ``If-None-Match: *``), which both honour.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping
from urllib.parse import urlparse

from log_store.errors import StorageError
from log_store.object_store import is_s3

_PROBED: dict[tuple[str, str], str | None] = {}  # (endpoint, bucket) -> None (honoured) or the refusal
_LOCK = threading.Lock()


def check(uri: str, storage: Mapping[str, str] | None) -> None:
    """Raise ``StorageError`` unless the store of ``uri`` refuses a second create of a commit file."""
    if not is_s3(uri):
        return
    endpoint = next((v for k, v in (storage or {}).items() if k.lower() in ("aws_endpoint_url", "aws_endpoint",
                                                                          "endpoint_url", "endpoint")), "aws")
    key = (endpoint, urlparse(uri).netloc)
    with _LOCK:
        if key not in _PROBED:
            _PROBED[key] = _probe(uri, storage)
    if _PROBED[key] is not None:
        raise StorageError(_PROBED[key])


def create(uri: str, data: bytes, storage: Mapping[str, str] | None) -> bool:
    """Put ``data`` at the S3 object ``uri`` unless an object is there (a store ``check`` passed):
    True if this call made it, False if it was there."""
    import obstore
    from obstore.exceptions import AlreadyExistsError

    try:
        obstore.put(_store(uri, storage), _key(uri), data, mode="create")
        return True
    except AlreadyExistsError:
        return False
    except Exception as exc:  # noqa: BLE001 - the store could not be reached or written
        raise StorageError(f"cannot write {uri} ({str(exc).strip().splitlines()[0][:300]})") from exc


def listed(uri: str, storage: Mapping[str, str] | None) -> bool:
    """Whether any object's key starts with the S3 prefix ``uri``."""
    import obstore

    try:
        return any(len(chunk) for chunk in obstore.list(_store(uri, storage), _key(uri), chunk_size=1))
    except Exception as exc:  # noqa: BLE001 - the store could not be reached or read
        raise StorageError(f"cannot list {uri} ({str(exc).strip().splitlines()[0][:300]})") from exc


def _store(uri: str, storage: Mapping[str, str] | None):
    from obstore.store import S3Store

    config, client = _obstore_options(storage or {})
    return S3Store(urlparse(uri).netloc, config=config, client_options=client)


def _key(uri: str) -> str:
    return urlparse(uri).path.lstrip("/")


def _probe(uri: str, storage: Mapping[str, str] | None) -> str | None:
    """None if the store refused a second create of one key, else why the store is refused."""
    import obstore
    from obstore.exceptions import AlreadyExistsError

    store = _store(uri, storage)
    key = f"{_key(uri).rstrip('/').rsplit('/', 1)[0]}/_lakelog_probe_{uuid.uuid4().hex}".lstrip("/")
    try:
        obstore.put(store, key, b"1", mode="create")
        try:
            obstore.put(store, key, b"2", mode="create")
        except AlreadyExistsError:
            return None  # refused: put-if-absent holds
        return (f"the store of {uri} does not honour conditional writes (PUT with If-None-Match): a second create "
                "of one key replaced the first, so of two writers of one Delta version one would lose its commit "
                "silently. Use a store that honours them (S3 does since August 2024; for MinIO, Ceph and others "
                "see their documentation)")
    except Exception as exc:  # noqa: BLE001 - the store could not be reached or written
        raise StorageError(f"cannot write to {uri} ({str(exc).strip().splitlines()[0][:300]}); "
                           "nothing was committed") from exc
    finally:
        try:
            obstore.delete(store, key)
        except Exception:  # noqa: BLE001 - a scratch object left behind is harmless
            pass


# delta-rs's S3 storage options (as ``object_store.storage_from_s3a`` gives them) -> obstore's.
_CONFIG = {"aws_endpoint_url": "endpoint", "aws_endpoint": "endpoint", "endpoint_url": "endpoint",
           "aws_access_key_id": "access_key_id", "aws_secret_access_key": "secret_access_key",
           "aws_session_token": "session_token", "aws_region": "region",
           "aws_virtual_hosted_style_request": "virtual_hosted_style_request"}


def _obstore_options(storage: Mapping[str, str]) -> tuple[dict, dict]:
    config, client = {}, {}
    for key, value in storage.items():
        name = key.lower()
        if name in _CONFIG:
            config[_CONFIG[name]] = value
        elif name == "aws_allow_http":
            client["allow_http"] = value.lower() == "true"
    if str(config.get("endpoint", "")).startswith("http://"):
        client["allow_http"] = True
    return config, client
