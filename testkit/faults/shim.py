"""The fault kit's LD_PRELOAD shims: built from their C source with gcc, cached by its hash.

Owns building a shim and naming it in a child's ``LD_PRELOAD``. Invariant: a shim loaded is
exactly the one its current source compiles to (the cache key is the source's hash, and an
object is renamed into place only once complete, so concurrent builders never load half of one).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["build", "merged_env", "preloaded"]

CACHE_DIR = Path(tempfile.gettempdir()) / "ripple-testkit-faults"
COMPILE_TIMEOUT_S = 60.0


def build(source: Path, cache_dir: Path = CACHE_DIR) -> Path:
    """The shared object `source` compiles to, built once per version of the source and of
    the headers beside it (which it may include)."""
    digest_of = hashlib.sha256(source.read_bytes())
    for header in sorted(source.parent.glob("*.h")):
        digest_of.update(header.name.encode() + b"\0" + header.read_bytes())
    digest = digest_of.hexdigest()[:16]
    out = cache_dir / f"{source.stem}-{digest}.so"
    if out.exists():
        return out
    gcc = shutil.which("gcc")
    if gcc is None:
        raise RuntimeError(f"gcc is needed to build {source.name} (apt-get install gcc)")
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = cache_dir / f"{source.stem}-{digest}.{os.getpid()}.so"
    argv = [gcc, "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o", str(tmp), str(source)]
    done = subprocess.run(
        [*argv, "-ldl"], capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S
    )
    if done.returncode != 0:
        raise RuntimeError(f"gcc failed on {source.name}:\n{done.stderr[-4000:]}")
    os.replace(tmp, out)
    return out


def preloaded(shim: Path, env: dict[str, str] | None = None) -> str:
    """An ``LD_PRELOAD`` value with `shim` first, before what `env` (or this process) has."""
    before = (os.environ if env is None else env).get("LD_PRELOAD", "")
    return " ".join(p for p in (str(shim), before) if p)


def merged_env(*envs: dict[str, str]) -> dict[str, str]:
    """The fault environments `envs` for one child: later values win, except that every
    shim named in an ``LD_PRELOAD`` is kept (once, in order)."""
    out: dict[str, str] = {}
    shims: list[str] = []
    for env in envs:
        out.update(env)
        shims += [s for s in env.get("LD_PRELOAD", "").split() if s not in shims]
    if shims:
        out["LD_PRELOAD"] = " ".join(shims)
    return out
