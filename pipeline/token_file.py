"""The worker's saved token: how a restarted process proves it is the member it was.

Owns one file, `<state dir>/worker-token.json`, holding this worker id's current worker
token. A live worker id is re-registered only by the holder of its current token
(docs/security.md), so a process that starts again under the same id presents the saved one
and, while the leader still holds its partitions, gets exactly them back under new epochs.

Invariants: the file is only ever replaced whole (written to a new file created with mode
0600, synced, renamed over the old one, the directory synced), so a crash leaves the old
token or the new one, never a torn one; a file that others could read (mode beyond 0600),
that another user owns, that is a symlink, or that names another worker id is never used;
and one process at a time uses a state directory (`prepare` takes an exclusive lock on
`worker.lock` in it for the process's life), so two processes given the same directory
cannot take the id from each other in turn with the token they share. Blocking: call it
from a thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import stat
from pathlib import Path

__all__ = ["TOKEN_FILE_NAME", "TokenFile"]

log = logging.getLogger(__name__)

TOKEN_FILE_NAME = "worker-token.json"
LOCK_FILE_NAME = "worker.lock"
# A worker token is at most this long (the coordinator's own bound); the file a few more.
TOKEN_CHARS_MAX = 256
FILE_BYTES_MAX = 1024


class TokenFile:
    def __init__(self, state_dir: str | os.PathLike[str], worker_id: str) -> None:
        self.dir = Path(state_dir)
        self.path = self.dir / TOKEN_FILE_NAME
        self.worker_id = worker_id
        self._lock_fd: int | None = None

    def prepare(self) -> None:
        """Create the state directory (mode 0700) if needed and lock it for this process;
        OSError when it cannot be created or written, or another process holds it."""
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not os.access(self.dir, os.W_OK | os.X_OK):
            raise PermissionError(f"state directory {self.dir} is not writable")
        if self._lock_fd is not None:
            return
        fd = os.open(self.dir / LOCK_FILE_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise BlockingIOError(
                f"another process uses the state directory {self.dir} (it holds "
                f"{LOCK_FILE_NAME}): one worker process per state directory"
            ) from None
        self._lock_fd = fd  # held until the process exits

    def release(self) -> None:
        """Give the state directory up (the process stops using it)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def load(self) -> str | None:
        """The saved token of this worker id, or None (no file, or one not to be used)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("saved token %s not used: %s", self.path, exc.strerror)
            return None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
                log.warning("saved token %s not used: not a file of this user", self.path)
                return None
            if st.st_mode & 0o077:
                log.warning(
                    "saved token %s not used: mode %o lets others read it (want 600)",
                    self.path,
                    stat.S_IMODE(st.st_mode),
                )
                return None
            raw = f.read(FILE_BYTES_MAX + 1)
        try:
            doc: object = json.loads(raw) if len(raw) <= FILE_BYTES_MAX else None
        except ValueError:
            doc = None
        token = doc.get("token") if isinstance(doc, dict) else None
        if not isinstance(doc, dict) or not isinstance(token, str) or not _plain(token):
            log.warning("saved token %s not used: not a token file", self.path)
            return None
        if doc.get("worker_id") != self.worker_id:
            log.warning("saved token %s not used: it is another worker id's", self.path)
            return None
        return token

    def save(self, token: str) -> None:
        """Replace the saved token with `token` (atomically; OSError when it cannot)."""
        if not _plain(token):
            raise ValueError("not a worker token")
        data = json.dumps({"worker_id": self.worker_id, "token": token}).encode()
        tmp = self.dir / f".{TOKEN_FILE_NAME}.{os.getpid()}.tmp"
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
        dir_fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _plain(token: str) -> bool:
    return 0 < len(token) <= TOKEN_CHARS_MAX and token.isascii() and token.isprintable()
