"""anna_xpu_kernels: installable skeleton; registers nothing yet."""

__version__ = "0.1.0"
