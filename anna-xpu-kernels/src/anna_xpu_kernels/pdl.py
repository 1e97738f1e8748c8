"""Programmatic dependent launch (PDL) between the decode-step kernels (NVIDIA, compute capability 9+).

A decode step at batch 1 is ~130 short kernels back to back. Normally each one starts only after the
previous one has finished and its writes are flushed, so every boundary costs a launch latency plus
the new kernel's ramp-up while the old kernel's last programs drain (a few microseconds each, a
tenth of a small model's step). With PDL (CUDA's programmatic stream serialization, which stream
capture turns into programmatic edges of the CUDA graph) a kernel launched with ``launch_pdl=True``
may start as soon as every program of the kernel before it has executed
``griddepcontrol.launch_dependents`` (or exited). Its programs do the work that does not depend on
the previous kernel (the GEMV loads its first weight tile), then block in ``griddepcontrol.wait``
until every earlier kernel has completed and its memory is visible.

The contract of each kernel launched with :func:`enabled` true (``USE_PDL``):

* before :func:`wait` it writes nothing and reads only memory that no PDL-launched kernel writes
  during the forward pass: weights, and the per-layer state a kernel itself updates once per pass
  (torch's kernels are not PDL-launched and act as full barriers, e.g. the sampler between steps);
* every program calls :func:`wait` before its first other load or store;
* it calls :func:`launch_dependents` at its start, so the next kernel's programs can take the
  multiprocessors this kernel's last programs leave free.

Because each kernel waits for the one before it to complete, completion stays in stream order.
``ANNA_TRITON_PDL=0`` turns PDL off (:func:`anna_xpu_kernels._env.pdl_requested`); it is off under
the interpreter and on devices before sm_90.
"""

from __future__ import annotations

import functools

import torch

# anna_xpu_kernels._triton sets up the interpreter before triton is first imported
# isort: off
from anna_xpu_kernels._env import pdl_requested
from anna_xpu_kernels._triton import INTERPRETING, tl, triton
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
# isort: on


@triton.jit
def wait(USE_PDL: tl.constexpr):
    """Block until every earlier kernel of the stream has completed and its writes are visible
    (``griddepcontrol.wait``); a no-op without ``USE_PDL``."""
    if USE_PDL:
        gdc_wait()


@triton.jit
def launch_dependents(USE_PDL: tl.constexpr):
    """Allow the next PDL-launched kernel to start once every program of this one got here
    (``griddepcontrol.launch_dependents``); a no-op without ``USE_PDL``."""
    if USE_PDL:
        gdc_launch_dependents()


@triton.jit
def enter(USE_PDL: tl.constexpr):
    """:func:`launch_dependents` then :func:`wait`: the start of a kernel with nothing to prefetch."""
    launch_dependents(USE_PDL)
    wait(USE_PDL)


@functools.cache
def _capable(device_index: int) -> bool:
    """An NVIDIA GPU of compute capability 9.0+ (ROCm builds also report ``cuda`` devices, with
    capabilities like 9.4, but have no ``griddepcontrol``)."""
    return torch.version.hip is None and torch.cuda.get_device_capability(device_index)[0] >= 9


def enabled(t: torch.Tensor) -> bool:
    """Whether kernels on ``t``'s device launch with PDL: an NVIDIA device of compute capability 9.0
    or newer, not under Triton's interpreter, and ``ANNA_TRITON_PDL`` not set to ``0``."""
    if INTERPRETING or t.device.type != "cuda" or not pdl_requested():
        return False
    return _capable(t.device.index if t.device.index is not None else torch.cuda.current_device())


def launch_options(t: torch.Tensor) -> dict[str, bool]:
    """Keyword arguments of a kernel launch on ``t``'s device: the kernel's ``USE_PDL`` constexpr and
    Triton's ``launch_pdl`` launch option, both :func:`enabled`."""
    use = enabled(t)
    return {"USE_PDL": use, "launch_pdl": use}
