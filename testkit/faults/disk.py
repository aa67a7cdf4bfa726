"""A node's disk that fails: sync errors, slow syncs and a full disk, for one data directory.

Two tools, because the faults differ in what they need:

- `DiskFaults`: an ``LD_PRELOAD`` shim (diskfault.c, built by testkit/faults/shim.py) in
  the processes started with `env()`. For files under one directory it fails
  fsync/fdatasync/msync(MS_SYNC) with ``EIO``, delays them by N ms, or fails
  write/pwrite/writev/ftruncate/(posix_)fallocate with ``ENOSPC``, as a small control file
  says; the test rewrites that file to turn faults on and off in a running process.
- `small_tmpfs_argv`: a command run on a size-limited tmpfs mounted over its data directory in
  a private mount namespace (``unshare --mount``): the kernel's own ``ENOSPC``, from every
  call that allocates (mmap page faults too), at the size the test chose. `fill` and `unfill`
  take the free space away and give it back through ``/proc/<pid>/root``.

Why a shim rather than FUSE or a loop image for sync faults: a sync's failure or delay is a
property of one call, and only a shim can pick that call, for one directory of one process,
and switch it at run time with no privilege and no daemon to keep alive; a FUSE passthrough
would put a second process and a kernel round trip on every read and write of the node, and
a loop image cannot fail a sync at all. The shim's limits: it sees calls that go through libc
(not raw syscalls, not a statically linked binary) and a write it fails never reached the
page cache (a real full disk may fail a later write-back instead); the tmpfs gives the real
kernel behaviour for a full disk, at the price of a data directory that lives as long as the
process's mount namespace.

Invariants: every shim fault carries an end (``until_ms`` on CLOCK_MONOTONIC, at most
``FAULT_S_MAX`` away), so it stops even if the test that set it died; the control file is
replaced by rename, so the shim never reads half of it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from testkit.faults.shim import build as shim_build
from testkit.faults.shim import preloaded

__all__ = [
    "DiskFaultCounts",
    "DiskFaults",
    "fill",
    "small_tmpfs_argv",
    "unfill",
]

SOURCE = Path(__file__).with_name("diskfault.c")
FAULT_S_MAX = 3600.0
SYNC_DELAY_MS_MAX = 60_000  # the shim clamps to the same bound
PREFIX_ENV = "RIPPLE_DISKFAULT_PREFIX"
CONTROL_ENV = "RIPPLE_DISKFAULT_CONTROL"
BALLAST_NAME = ".ripple-ballast"
FILL_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class DiskFaultCounts:
    """Faults the shim injected, summed over every process that loaded it."""

    sync_eio: int = 0
    sync_delay: int = 0
    write_enospc: int = 0


class DiskFaults:
    """Sync and write faults for files under `prefix`, in processes started with `env()`.

    `control` is the file the shim reads (created here; its directory must exist)."""

    def __init__(self, prefix: Path, control: Path, *, shim: Path | None = None) -> None:
        self.prefix = prefix.resolve()
        self.control = control
        self.shim = shim_build(SOURCE) if shim is None else shim
        self.clear()

    def env(self) -> dict[str, str]:
        """Environment for a child: the shim preloaded, aimed at `prefix` and `control`."""
        return {
            "LD_PRELOAD": preloaded(self.shim),
            PREFIX_ENV: str(self.prefix),
            CONTROL_ENV: str(self.control),
        }

    def set(
        self,
        *,
        duration_s: float,
        sync_eio: bool = False,
        sync_delay_ms: int = 0,
        write_enospc: bool = False,
    ) -> None:
        """These faults from now for `duration_s` (replacing any set before)."""
        if not 0.0 < duration_s <= FAULT_S_MAX:
            raise ValueError(f"duration_s must be in (0, {FAULT_S_MAX}], got {duration_s}")
        if not 0 <= sync_delay_ms <= SYNC_DELAY_MS_MAX:
            raise ValueError(f"sync_delay_ms must be in [0, {SYNC_DELAY_MS_MAX}]")
        words = [f"until_ms={int((time.monotonic() + duration_s) * 1000)}"]
        if sync_eio:
            words.append("sync=eio")
        if sync_delay_ms:
            words.append(f"sync_delay_ms={sync_delay_ms}")
        if write_enospc:
            words.append("write=enospc")
        self._write(" ".join(words) + "\n")

    def clear(self) -> None:
        """No fault, from the next call of every process on."""
        self._write("\n")

    @contextlib.contextmanager
    def faults(
        self,
        *,
        duration_s: float,
        sync_eio: bool = False,
        sync_delay_ms: int = 0,
        write_enospc: bool = False,
    ) -> Iterator[None]:
        """The faults for the block (and never past `duration_s`)."""
        self.set(
            duration_s=duration_s,
            sync_eio=sync_eio,
            sync_delay_ms=sync_delay_ms,
            write_enospc=write_enospc,
        )
        try:
            yield
        finally:
            self.clear()

    def counts(self) -> DiskFaultCounts:
        totals = {"sync_eio": 0, "sync_delay": 0, "write_enospc": 0}
        for path in self.control.parent.glob(self.control.name + ".counts.*"):
            with contextlib.suppress(OSError, ValueError):
                for word in path.read_text().split():
                    key, value = word.split("=", 1)
                    if key in totals:
                        totals[key] += int(value)
        return DiskFaultCounts(**totals)

    def _write(self, text: str) -> None:
        tmp = self.control.with_name(f"{self.control.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, self.control)


def small_tmpfs_argv(data_dir: Path, size_bytes: int, argv: list[str]) -> list[str]:
    """`argv` run with a tmpfs of `size_bytes` mounted on `data_dir` (made if missing), seen
    by it alone.

    unshare execs without forking, so the returned command keeps one PID from start to end
    (the one a `Proc` tracks). The mount goes when the process's namespace does: whatever the
    node wrote there lives only as long as it runs."""
    if size_bytes < 4096:
        raise ValueError(f"a tmpfs smaller than a page cannot hold a file: {size_bytes}")
    mount = (
        'mkdir -p "$0" && mount -t tmpfs -o size="$1" ripple-small-disk "$0" && shift && exec "$@"'
    )
    return [
        "unshare", "--mount", "--propagation", "private", "sh", "-c", mount,
        str(data_dir), str(size_bytes), *argv,
    ]  # fmt: skip


def _seen_by(pid: int, data_dir: Path) -> Path:
    """`data_dir` as process `pid` sees it (inside its mount namespace)."""
    return Path(f"/proc/{pid}/root") / data_dir.resolve().relative_to("/")


def fill(pid: int, data_dir: Path, leave_bytes: int = 0) -> int:
    """Fill the disk process `pid` sees at `data_dir` up to `leave_bytes` of free space, with
    a ballast file; returns the bytes written. `unfill` gives them back."""
    target = _seen_by(pid, data_dir)
    written = 0
    fd = os.open(target / BALLAST_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        while True:
            st = os.statvfs(target)
            want = min(FILL_CHUNK_BYTES, st.f_bavail * st.f_frsize - leave_bytes)
            if want <= 0:
                break
            try:
                n = os.write(fd, b"\0" * want)
            except OSError as exc:
                if exc.errno == errno.ENOSPC:  # the last blocks went before statvfs saw it
                    break
                raise
            if n == 0:
                break
            written += n
    finally:
        os.close(fd)
    return written


def unfill(pid: int, data_dir: Path) -> None:
    """Remove the ballast `fill` wrote: the disk has its free space back."""
    with contextlib.suppress(FileNotFoundError):
        (_seen_by(pid, data_dir) / BALLAST_NAME).unlink()
