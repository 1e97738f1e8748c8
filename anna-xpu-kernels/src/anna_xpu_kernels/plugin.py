"""Entry module of anna_xpu_kernels. It implements no hooks yet (see the package README)."""
