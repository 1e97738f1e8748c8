"""anna_xpu_kernels: Triton (CUDA, Intel XPU) and fla-core implementations of Anna's kernel ops.

The plugin (:mod:`anna_xpu_kernels.plugin`) registers them with explicit priorities and
availability probes (:mod:`anna_xpu_kernels.probes`); importing this package imports nothing heavy.
"""

__version__ = "0.1.0"
