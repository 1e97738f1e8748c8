"""Anna's one cache root: ``$ANNA_CACHE_DIR``, else ``~/.cache/anna`` (never inside a model folder, which
may be read-only).

What lives there (each under its own subfolder, keyed so a stale entry is never hit):
``gguf-tokenizers/`` (tokenizers converted from GGUF metadata, :mod:`anna_core.weights.gguf_tokenizer`),
``quant-layouts/<key>/`` (pre-quantized checkpoints' weights repacked into Anna's layouts, keyed by the source
files, device kind, dtype, method and versions: :mod:`anna_core.weights.layout_cache`) and
``triton/<key>/`` (compiled Triton kernels and autotuning results of a kernel plugin, keyed by GPU,
driver and software versions: :mod:`anna_xpu_kernels.kernel_cache`). An unwritable cache only costs speed.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR_ENV = "ANNA_CACHE_DIR"


def cache_dir() -> Path:
    """``$ANNA_CACHE_DIR`` if set, else ``~/.cache/anna``."""
    return Path(os.environ.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "anna").expanduser()
