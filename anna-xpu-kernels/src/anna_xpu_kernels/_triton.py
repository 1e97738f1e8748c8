"""Shared Triton plumbing: the interpreter switch, the kernel cache folder, autotuning (one fixed config
when interpreting, results kept on disk on a device).

Importing this module imports triton; only the kernel modules (resolved lazily by the kernel
registry after a probe accepted) import it.
"""

from __future__ import annotations

from collections.abc import Sequence

from anna_xpu_kernels._env import enable_interpreter_if_requested

INTERPRETING = enable_interpreter_if_requested()
"""Whether kernels defined after this import run under Triton's CPU interpreter (fixed at import)."""

if not INTERPRETING:  # compiled kernels and autotuning results persist under Anna's cache root
    from anna_xpu_kernels import kernel_cache

    kernel_cache.configure()

import triton
import triton.language as tl  # noqa: F401  (re-exported for the kernel modules)


def _interpreter_scalar_index_shim() -> None:
    """Let the interpreter use loaded scalars as loop bounds under numpy >= 2.4.

    Triton 3.6's interpreter turns a tensor into a Python int with ``int(ndarray)``; loaded scalars are
    1-element arrays of shape ``(1,)``, which numpy 2.4 no longer converts (``TypeError: only
    0-dimensional arrays can be converted to Python scalars``). This re-registers ``__index__`` with an
    explicit ``.item()``; kernels and compiled (GPU) runs are unaffected.
    """
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "_anna_shim", False):
        return

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patch_lang_tensor._anna_shim = True
    interpreter._patch_lang_tensor = patch_lang_tensor


if INTERPRETING:
    _interpreter_scalar_index_shim()


def autotune(configs: Sequence[triton.Config], fixed: triton.Config, key: list[str], **kwargs):
    """``@triton.autotune`` over ``configs`` on a device; over ``[fixed]`` alone when interpreting.

    Autotuning benchmarks every config on the device, which the CPU interpreter cannot do; with a
    single config Triton skips benchmarking. Pass ``restore_value=[...]`` for kernels that update an
    argument in place (the state pools), so benchmark runs do not advance the state. On a device the
    results are kept in Triton's cache (``cache_results``; the cache folder: :mod:`anna_xpu_kernels.kernel_cache`),
    so a later process with the same shapes tunes nothing.
    """
    if INTERPRETING:
        return triton.autotune(configs=[fixed], key=key, **kwargs)
    return triton.autotune(configs=list(configs), key=key, cache_results=True, **kwargs)


def next_pow2(n: int) -> int:
    """Smallest power of two ``>= max(n, 1)``."""
    return triton.next_power_of_2(max(int(n), 1))
