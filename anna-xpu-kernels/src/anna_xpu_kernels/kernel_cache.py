"""Where Triton keeps the compiled kernels and autotuning results: under Anna's cache root, per machine.

Start-up compiles every kernel variant and autotunes each shape (BENCHMARKS.md: most of a cold start).
Both depend only on the GPU, the driver, the software versions and the model's shapes, so they are kept
in ``$ANNA_CACHE_DIR/triton/<key>/`` (:mod:`anna_core.cache_dir`; default ``~/.cache/anna``), ``<key>``
naming the GPU, its compute capability, the driver and CUDA versions and the torch, Triton and
anna-xpu-kernels versions: a second start of the same model on the same machine compiles and tunes
nothing (autotuning results are cached with Triton's ``cache_results``, see :mod:`anna_xpu_kernels._triton`).
A ``TRITON_CACHE_DIR`` the user set is left alone.

Entries are checked before Triton may read them (:func:`sweep`): an entry folder holding an empty file,
JSON that does not parse or a CUDA binary without its ELF header is removed, so Triton compiles (or tunes)
it again instead of trusting it. A cache that cannot be written only costs speed.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import json
import logging
import os
import re
import shutil
from pathlib import Path

log = logging.getLogger("anna.kernels")

TRITON_CACHE_ENV = "TRITON_CACHE_DIR"
CACHE_FORMAT = "1"
_ELF = b"\x7fELF"


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def _cuda_driver_version() -> str:
    """The CUDA driver's version (``cuDriverGetVersion``), or ``"unknown"``."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        out = ctypes.c_int()
        if lib.cuDriverGetVersion(ctypes.byref(out)) == 0:
            return str(out.value)
    except OSError:
        pass
    return "unknown"


def device_identity() -> dict[str, str] | None:
    """What the cache key names about this machine's current accelerator, or None without one."""
    import torch

    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return {"device": torch.cuda.get_device_name(), "capability": f"sm{major}{minor}",
                "driver": _cuda_driver_version(), "runtime": f"cuda{torch.version.cuda}"}
    if torch.xpu.is_available():
        return {"device": torch.xpu.get_device_name(), "capability": "xpu", "driver": "unknown", "runtime": "xpu"}
    return None


def cache_key(identity: dict[str, str]) -> str:
    """The folder name of one machine and software stack: readable, filesystem-safe."""
    parts = [f"v{CACHE_FORMAT}", identity["device"], identity["capability"], f"driver{identity['driver']}",
             identity["runtime"], f"torch{_version('torch')}", f"triton{_version('triton')}",
             f"anna{_version('anna-xpu-kernels')}"]
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", "-".join(parts)).strip("_")


def _entry_is_sound(entry: Path) -> bool:
    for f in entry.iterdir():
        if not f.is_file():
            continue
        data = f.read_bytes()
        if not data:
            return False
        if f.suffix == ".json":
            try:
                json.loads(data)
            except ValueError:
                return False
        elif f.suffix == ".cubin" and not data.startswith(_ELF):
            return False
    return True


def sweep(root: Path) -> int:
    """Remove the entry folders of ``root`` (a Triton cache: one folder per key) that cannot be trusted;
    returns how many were removed (each is then rebuilt by Triton when next needed)."""
    removed = 0
    if not root.is_dir():
        return 0
    for entry in root.iterdir():
        if not entry.is_dir():
            continue
        try:
            sound = _entry_is_sound(entry)
        except OSError:
            sound = False
        if not sound:
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
    if removed:
        log.warning("removed %d corrupt Triton cache entries from %s (they are rebuilt when needed)", removed, root)
    return removed


def configure(identity: dict[str, str] | None = None, root: Path | None = None) -> Path | None:
    """Point Triton's cache at ``<root>/triton/<key>`` (default root: :func:`anna_core.cache_dir.cache_dir`)
    unless ``TRITON_CACHE_DIR`` is set, after sweeping it (:func:`sweep`); called once, before the first
    kernel compiles. Returns the folder, or None (the user's setting kept, no accelerator, or the folder
    cannot be created: Triton then uses its own default).

    Args:
        identity: the machine (default :func:`device_identity`).
    """
    if os.environ.get(TRITON_CACHE_ENV):
        return None
    identity = identity if identity is not None else device_identity()
    if identity is None:
        return None
    if root is None:
        from anna_core.cache_dir import cache_dir

        root = cache_dir()
    folder = root / "triton" / cache_key(identity)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        log.warning("cannot create the kernel cache %s (%s); Triton uses its own default", folder, exc)
        return None
    sweep(folder)
    os.environ[TRITON_CACHE_ENV] = str(folder)
    log.info("kernel cache: %s", folder)
    return folder
