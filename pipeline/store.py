"""Object stores: the create-only, immutable-object storage under the source log and checkpoints.

Exceptions::

    StoreError          root; boto3/botocore/OS errors are translated to it where they enter
    +-- StoreKeyMissing get() of a key that does not exist
    +-- StoreKeyInvalid a key that is empty, absolute or walks out of the store root

Failures: an S3 call is retried by botocore's "standard" mode (exponential backoff with full
jitter, capped at 20 s) on throttling (503 SlowDown), 5xx answers, resets and timeouts, at
most S3_ATTEMPTS_MAX attempts, each connect and read bounded; what is still failing then is a
StoreError for the caller's own retry (the next micro-batch, checkpoint round or host call).
`CountedStore` counts those failures by operation (ripple_worker_store_errors_total).

Invariant: objects are immutable once visible, but for one kind. ``put_if_absent`` creates a
key at most once (S3: ``IfNoneMatch='*'``; local: ``os.link`` of a fully written, fsynced
temp file), so a reader never sees a partial object and two writers never overwrite each
other. The exception is ``put_newer``, the results snapshots' only write: it replaces an
object whole (S3: one PUT; local: ``os.replace`` of a fsynced temp file) and only while its
recorded version is not newer than the writer's (S3: ``IfMatch`` on the ETag it read, or
``IfNoneMatch``; local: under an ``flock`` of the object's hidden version file), so a
writer with an older version never replaces a newer object, however late it runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

__all__ = [
    "CountedStore",
    "LocalStore",
    "ObjectStore",
    "S3Store",
    "StoreError",
    "StoreKeyInvalid",
    "StoreKeyMissing",
    "open_store",
]

# Temp files live next to their final name (same filesystem, so os.link works) and are hidden
# from listings by this prefix.
TEMP_PREFIX = ".tmp-"
# S3 answers 409 ConditionalRequestConflict while another conditional write to the same key is
# in flight; the retry then sees 412 (lost) or 200 (won).
CONFLICT_RETRIES_MAX = 5
CONFLICT_BACKOFF_S = 0.05
# botocore's own retries of one S3 call: attempts (the first included) and each attempt's
# bounds. The whole call stays well under a micro-batch's or a host call's time.
S3_ATTEMPTS_MAX = 5
S3_CONNECT_TIMEOUT_S = 5.0
S3_READ_TIMEOUT_S = 30.0
# S3 user metadata naming the version `put_newer` wrote (x-amz-meta-ripple-version).
VERSION_METADATA = "ripple-version"
# A local object's version lives in a hidden file beside it, ".{name}" + this: readers skip
# "." names, and its suffix keeps it out of a `*.parquet` glob (DuckDB's matches dot files).
VERSION_SUFFIX = ".version"
# A local put_newer waits at most this many tries of this long for another writer's lock.
LOCK_ATTEMPTS_MAX = 100
LOCK_BACKOFF_S = 0.01
# The operations CountedStore counts failures of (the metric's `op` label).
STORE_OPS = ("put", "get", "list")


class StoreError(Exception):
    """Root of every store failure."""


class StoreKeyMissing(StoreError, KeyError):
    """The requested key does not exist."""


class StoreKeyInvalid(StoreError, ValueError):
    """The key is not a safe relative object name."""


class ObjectStore(Protocol):
    """What the pipeline needs from storage: create-only puts, reads and sorted listings."""

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create ``key`` with ``data``; False (and no change) if the key already exists."""
        ...

    def get(self, key: str) -> bytes:
        """The object's bytes; raises StoreKeyMissing."""
        ...

    def list_keys(self, prefix: str) -> list[str]:
        """Every key starting with ``prefix``, sorted."""
        ...

    def local_path(self, key: str) -> str | None:
        """A filesystem path of the object when the store is local, else None."""
        ...

    def uri(self, key: str) -> str:
        """An absolute URI naming the object (``file://`` or ``s3://``)."""
        ...


def _check_key(key: str) -> str:
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise StoreKeyInvalid(f"invalid object key {key!r}")
    if parts[-1].startswith(TEMP_PREFIX):
        raise StoreKeyInvalid(f"object key {key!r} uses the reserved prefix {TEMP_PREFIX!r}")
    return key


class LocalStore:
    """A directory as an object store (the embedded default)."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *_check_key(key).split("/"))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        directory = os.path.dirname(path)
        try:
            os.makedirs(directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=directory)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                try:
                    # link() fails if the name exists: an atomic create-only publish of a
                    # complete file (rename() would silently replace).
                    os.link(tmp, path)
                except FileExistsError:
                    return False
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
            self._fsync_dir(directory)
            return True
        except OSError as exc:
            raise StoreError(f"put {key!r} under {self.root}: {exc}") from exc

    @staticmethod
    def _fsync_dir(directory: str) -> None:
        # The new directory entry must survive a crash, not only the file's bytes.
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def get(self, key: str) -> bytes:
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError as exc:
            raise StoreKeyMissing(key) from exc
        except OSError as exc:
            raise StoreError(f"get {key!r} under {self.root}: {exc}") from exc

    def list_keys(self, prefix: str) -> list[str]:
        # Walk only the deepest directory the prefix names instead of the whole store.
        base_rel = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        base = os.path.join(self.root, *base_rel.split("/")) if base_rel else self.root
        keys: list[str] = []
        try:
            for dirpath, _dirnames, filenames in os.walk(base):
                rel_dir = os.path.relpath(dirpath, self.root).replace(os.sep, "/")
                for name in filenames:
                    if name.startswith(TEMP_PREFIX):
                        continue
                    key = name if rel_dir == "." else f"{rel_dir}/{name}"
                    if key.startswith(prefix):
                        keys.append(key)
        except OSError as exc:
            raise StoreError(f"list {prefix!r} under {self.root}: {exc}") from exc
        keys.sort()
        return keys

    def local_path(self, key: str) -> str | None:
        return self._path(key)

    def put_newer(self, key: str, data: bytes, version: int) -> bool:
        """Replace ``key`` with ``data`` unless its version is newer than ``version``; False
        (and no change) if it is. The version file is locked for the whole compare-and-replace
        and written before the object: a crash between the two leaves the same version to
        write again (an equal version is written, so it repairs that), never an older one."""
        path = self._path(key)
        directory, name = os.path.split(path)
        try:
            os.makedirs(directory, exist_ok=True)
            version_file = os.path.join(directory, f".{name}{VERSION_SUFFIX}")
            fd = os.open(version_file, os.O_RDWR | os.O_CREAT, 0o600)
            with os.fdopen(fd, "r+b") as lock:
                _lock(lock.fileno(), key)
                held = lock.read().strip()
                if held and int(held) > version:
                    return False
                lock.seek(0)
                lock.truncate()
                lock.write(str(version).encode())
                lock.flush()
                os.fsync(lock.fileno())
                tmp_fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=directory)
                try:
                    with os.fdopen(tmp_fd, "wb") as f:
                        f.write(data)
                        f.flush()
                        os.fsync(f.fileno())
                    os.replace(tmp, path)  # atomic: a reader sees the old file or the new
                finally:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(tmp)
            self._fsync_dir(directory)
            return True
        except (OSError, ValueError) as exc:
            raise StoreError(f"put_newer {key!r} under {self.root}: {exc}") from exc

    def delete(self, key: str) -> None:
        """Remove the object (a purge of a dropped pipeline's); one already gone is fine."""
        try:
            os.remove(self._path(key))
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StoreError(f"delete {key!r} under {self.root}: {exc}") from exc

    def uri(self, key: str) -> str:
        return "file://" + self._path(key) if key else "file://" + self.root + "/"


def _lock(fd: int, key: str) -> None:
    """flock `fd`, waiting a bounded time: a holder stopped mid-write (SIGSTOP) fails this
    write (the caller's next round retries) instead of stalling it."""
    for _ in range(LOCK_ATTEMPTS_MAX):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            time.sleep(LOCK_BACKOFF_S)
    raise StoreError(f"put_newer {key!r}: another writer holds it")


class S3Store:
    """Any S3-compatible endpoint through boto3, using conditional (create-only) puts."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        client: Any = None,  # a boto3 S3 client (boto3 is untyped); only this class calls it
    ) -> None:
        if not bucket:
            raise StoreKeyInvalid("S3 bucket name is empty")
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        if client is None:
            import boto3  # deferred: local-only deployments never pay for importing boto3

            client = boto3.client("s3", endpoint_url=endpoint_url, config=s3_client_config())
        self._client = client

    def _full(self, key: str) -> str:
        return self.prefix + _check_key(key)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        full = self._full(key)
        for attempt in range(CONFLICT_RETRIES_MAX):
            try:
                self._client.put_object(Bucket=self.bucket, Key=full, Body=data, IfNoneMatch="*")
                return True
            except ClientError as exc:
                code, status = _client_error(exc)
                if code == "PreconditionFailed" or status == 412:
                    return False
                if code == "ConditionalRequestConflict" or status == 409:
                    time.sleep(CONFLICT_BACKOFF_S * (attempt + 1))
                    continue
                raise StoreError(f"put s3://{self.bucket}/{full}: {exc}") from exc
            except BotoCoreError as exc:
                raise StoreError(f"put s3://{self.bucket}/{full}: {exc}") from exc
        raise StoreError(
            f"put s3://{self.bucket}/{full}: still conflicting after {CONFLICT_RETRIES_MAX} tries"
        )

    def get(self, key: str) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        full = self._full(key)
        try:
            response = self._client.get_object(Bucket=self.bucket, Key=full)
            return bytes(response["Body"].read())
        except ClientError as exc:
            code, status = _client_error(exc)
            if code in ("NoSuchKey", "404") or status == 404:
                raise StoreKeyMissing(key) from exc
            raise StoreError(f"get s3://{self.bucket}/{full}: {exc}") from exc
        except BotoCoreError as exc:
            raise StoreError(f"get s3://{self.bucket}/{full}: {exc}") from exc

    def list_keys(self, prefix: str) -> list[str]:
        from botocore.exceptions import BotoCoreError, ClientError

        keys: list[str] = []
        try:
            paginator = self._client.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.bucket, Prefix=self.prefix + prefix):
                for item in page.get("Contents", []):
                    keys.append(item["Key"][len(self.prefix) :])
        except (ClientError, BotoCoreError) as exc:
            raise StoreError(f"list s3://{self.bucket}/{self.prefix}{prefix}: {exc}") from exc
        keys.sort()
        return keys

    def local_path(self, key: str) -> str | None:
        return None

    def put_newer(self, key: str, data: bytes, version: int) -> bool:
        """Replace ``key`` with ``data`` unless its version is newer than ``version``; False
        (and no change) if it is. A compare-and-swap: the PUT is conditional on the ETag
        read with the version (or on no object), and a lost race reads again."""
        from botocore.exceptions import BotoCoreError, ClientError

        full = self._full(key)
        for attempt in range(CONFLICT_RETRIES_MAX):
            try:
                condition = self._version_condition(full, version)
                if condition is None:
                    return False
                self._client.put_object(
                    Bucket=self.bucket,
                    Key=full,
                    Body=data,
                    Metadata={VERSION_METADATA: str(version)},
                    **condition,
                )
                return True
            except ClientError as exc:
                code, status = _client_error(exc)
                if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (
                    409,
                    412,
                ):
                    time.sleep(CONFLICT_BACKOFF_S * (attempt + 1))
                    continue  # another writer got there first: compare with its version
                raise StoreError(f"put_newer s3://{self.bucket}/{full}: {exc}") from exc
            except (BotoCoreError, ValueError) as exc:
                raise StoreError(f"put_newer s3://{self.bucket}/{full}: {exc}") from exc
        raise StoreError(
            f"put_newer s3://{self.bucket}/{full}: still conflicting after "
            f"{CONFLICT_RETRIES_MAX} tries"
        )

    def _version_condition(self, full: str, version: int) -> dict[str, str] | None:
        """The PUT condition that replaces exactly the object read (None: it is newer)."""
        from botocore.exceptions import ClientError

        try:
            head = self._client.head_object(Bucket=self.bucket, Key=full)
        except ClientError as exc:
            code, status = _client_error(exc)
            if code in ("NoSuchKey", "404", "NotFound") or status == 404:
                return {"IfNoneMatch": "*"}
            raise
        held = head.get("Metadata", {}).get(VERSION_METADATA)
        if held is not None and int(held) > version:
            return None
        return {"IfMatch": str(head["ETag"])}

    def delete(self, key: str) -> None:
        """Remove the object (a purge of a dropped pipeline's); one already gone is fine."""
        from botocore.exceptions import BotoCoreError, ClientError

        full = self._full(key)
        try:
            self._client.delete_object(Bucket=self.bucket, Key=full)
        except (ClientError, BotoCoreError) as exc:
            raise StoreError(f"delete s3://{self.bucket}/{full}: {exc}") from exc

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{self.prefix}{_check_key(key) if key else ''}"


def s3_client_config() -> Any:
    """botocore's Config for the store's client: bounded retries with backoff and full jitter
    ("standard" mode), bounded connects and reads (botocore's defaults wait 60 s each)."""
    from botocore.config import Config

    return Config(
        retries={"mode": "standard", "max_attempts": S3_ATTEMPTS_MAX},
        connect_timeout=S3_CONNECT_TIMEOUT_S,
        read_timeout=S3_READ_TIMEOUT_S,
    )


class CountedStore:
    """An ObjectStore that counts the calls of `inner` that failed (a StoreError other than
    a missing key, which is an answer), by operation: what the worker's store-errors metric
    and alert read."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.errors = dict.fromkeys(STORE_OPS, 0)

    def _failed(self, op: str, exc: StoreError) -> None:
        if not isinstance(exc, StoreKeyMissing | StoreKeyInvalid):
            self.errors[op] += 1

    def put_if_absent(self, key: str, data: bytes) -> bool:
        try:
            return self.inner.put_if_absent(key, data)
        except StoreError as exc:
            self._failed("put", exc)
            raise

    def get(self, key: str) -> bytes:
        try:
            return self.inner.get(key)
        except StoreError as exc:
            self._failed("get", exc)
            raise

    def list_keys(self, prefix: str) -> list[str]:
        try:
            return self.inner.list_keys(prefix)
        except StoreError as exc:
            self._failed("list", exc)
            raise

    def local_path(self, key: str) -> str | None:
        return self.inner.local_path(key)

    def put_newer(self, key: str, data: bytes, version: int) -> bool:
        put_newer = getattr(self.inner, "put_newer", None)
        if put_newer is None:
            raise StoreError(f"the store {self.inner.uri('')} replaces no object")
        try:
            return bool(put_newer(key, data, version))
        except StoreError as exc:
            self._failed("put", exc)
            raise

    def uri(self, key: str) -> str:
        return self.inner.uri(key)


def _client_error(exc: Any) -> tuple[str, int]:
    """The code and HTTP status of a botocore ClientError (untyped), read defensively."""
    error = exc.response.get("Error", {})
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return str(error.get("Code", "")), int(status or 0)


def open_store(uri: str, s3_endpoint: str | None = None) -> ObjectStore:
    """Open ``file:///abs/dir`` as a LocalStore or ``s3://bucket/prefix`` as an S3Store."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise StoreError(f"file URI must be local (file:///path), got {uri!r}")
        return LocalStore(unquote(parsed.path))
    if parsed.scheme == "s3":
        return S3Store(parsed.netloc, parsed.path, endpoint_url=s3_endpoint)
    raise StoreError(f"unsupported store URI {uri!r} (use file:///dir or s3://bucket/prefix)")
