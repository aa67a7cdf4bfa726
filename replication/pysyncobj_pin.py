"""The one pysyncobj release `replication` is written against, checked where it is patched.

Owns the pin. `replication.raft_node` overrides SyncObj's private (name-mangled) methods,
`replication.transport` and `replication.connection` stand in for the internals of its TCP
transport, and `replication.poller` for its poller: contracts another release may change
without notice. Invariant: each of those modules calls `check_pysyncobj_version()` at
import, so against any other release the process fails at start-up with a message naming
the pin, not later with a corrupted log.
"""

from __future__ import annotations

import pysyncobj.version

__all__ = ["PYSYNCOBJ_VERSION", "check_pysyncobj_version"]

PYSYNCOBJ_VERSION = "0.3.17"  # as pinned in setup.cfg (install_requires)


def check_pysyncobj_version(found: str | None = None) -> None:
    """Raise ImportError unless `found` (by default the installed pysyncobj's version) is the
    pinned one."""
    if found is None:
        found = str(pysyncobj.version.VERSION)
    if found != PYSYNCOBJ_VERSION:
        raise ImportError(
            f"replication patches pysyncobj {PYSYNCOBJ_VERSION} (setup.cfg pins "
            f"pysyncobj=={PYSYNCOBJ_VERSION}) and found pysyncobj {found}: install "
            f"pysyncobj=={PYSYNCOBJ_VERSION}, or port the modules that call "
            "replication.pysyncobj_pin.check_pysyncobj_version to the new release and move "
            "the pin"
        )
