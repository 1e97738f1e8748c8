"""Device handling in one place: no other module branches on the device type.

Wraps cpu / cuda / xpu: choosing the device, synchronizing, memory statistics.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from anna_core.errors import AnnaError

_DTYPES = {
    "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
    "fp16": torch.float16, "float16": torch.float16, "half": torch.float16,
    "fp32": torch.float32, "float32": torch.float32, "float": torch.float32,
}


def resolve_device(name: str = "auto") -> torch.device:
    """``"auto"`` picks cuda, then xpu, then cpu.

    Raises:
        AnnaError: the named device is not available.
    """
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if hasattr(torch, "xpu") and torch.xpu.is_available():
            return torch.device("xpu")
        return torch.device("cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise AnnaError("--device cuda requested but no CUDA device is available")
    if dev.type == "xpu" and not (hasattr(torch, "xpu") and torch.xpu.is_available()):
        raise AnnaError("--device xpu requested but no Intel XPU is available")
    if dev.type not in ("cpu", "cuda", "xpu"):
        raise AnnaError(f"unsupported device {name!r}; use auto, cpu, cuda or xpu")
    return dev


def resolve_dtype(name: str | torch.dtype, device: torch.device, checkpoint_dtype: str | None = None) -> torch.dtype:
    """``"auto"``: the checkpoint's dtype on accelerators (bf16 if unknown), float32 on CPU.

    Raises:
        AnnaError: unknown dtype name.
    """
    if isinstance(name, torch.dtype):
        return name
    if name == "auto":
        if device.type == "cpu":
            return torch.float32
        return _DTYPES.get(str(checkpoint_dtype), torch.bfloat16)
    if name not in _DTYPES:
        raise AnnaError(f"unknown dtype {name!r}; use auto, bf16, fp16 or fp32")
    return _DTYPES[name]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "xpu":
        torch.xpu.synchronize(device)


def empty_cache(device: torch.device) -> None:
    """Give the allocator's cached, unused blocks back to the device (after an out-of-memory); no-op on the CPU."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
    elif device.type == "xpu" and hasattr(torch.xpu, "empty_cache"):
        torch.xpu.empty_cache()


def memory_stats(device: torch.device) -> dict[str, int]:
    """``{"allocated_bytes", "reserved_bytes", "total_bytes", "free_bytes"}`` where known."""
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        return {"allocated_bytes": torch.cuda.memory_allocated(device),
                "reserved_bytes": torch.cuda.memory_reserved(device),
                "free_bytes": free, "total_bytes": total}
    if device.type == "xpu":
        return {"allocated_bytes": torch.xpu.memory_allocated(device),
                "reserved_bytes": torch.xpu.memory_reserved(device)}
    try:
        import os

        pages = os.sysconf("SC_PHYS_PAGES")
        avail = os.sysconf("SC_AVPHYS_PAGES")
        size = os.sysconf("SC_PAGE_SIZE")
        return {"total_bytes": pages * size, "free_bytes": avail * size}
    except (ValueError, OSError, AttributeError):
        return {}


# -- accelerator services: graphs, events, peak memory ----------------------------------------------


class StepGraph:
    """One captured device graph; ``replay()`` re-issues the captured work on the tensors it captured
    (static addresses). ``graph`` keeps the backend's graph object alive."""

    def __init__(self, replay: Callable[[], None], graph: object = None):
        self._replay = replay
        self.graph = graph

    def replay(self) -> None:
        self._replay()


class Accelerator:
    """Device services behind one interface, so callers never branch on the device type.

    ``graphs`` says whether the device can capture and replay graphs (CUDA graphs; XPU graphs where
    the PyTorch build has ``torch.xpu.XPUGraph``; never on CPU). Tests may subclass this to fake a
    graph-capable device.

    Args:
        device: the torch device served.
    """

    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self._module = {"cuda": getattr(torch, "cuda", None), "xpu": getattr(torch, "xpu", None)}.get(self.device.type)

    @property
    def graphs(self) -> bool:
        if self.device.type == "cuda":
            return True
        return self.device.type == "xpu" and hasattr(torch.xpu, "XPUGraph")

    @property
    def separate_host_memory(self) -> bool:
        """Whether the device's memory is apart from host memory (accelerators), so that keeping weights in
        host memory frees device memory (expert offload); False on the CPU."""
        return self._module is not None

    def synchronize(self) -> None:
        synchronize(self.device)

    def graph_pool(self) -> object | None:
        """A memory-pool handle shared by the graphs of one runner (None where graphs are absent)."""
        if self.device.type == "cuda":
            return torch.cuda.graph_pool_handle()
        if self.device.type == "xpu" and hasattr(torch.xpu, "graph_pool_handle"):
            return torch.xpu.graph_pool_handle()
        return None

    def capture(self, fn: Callable[[], None], pool: object | None = None) -> StepGraph:
        """Run ``fn`` once under graph capture and return the graph that replays its device work.

        ``fn`` must issue only device work on tensors that outlive the graph (no host syncs).

        Raises:
            AnnaError: the device cannot capture graphs.
        """
        if self.device.type == "cuda":
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                fn()
            return StepGraph(g.replay, g)
        if self.device.type == "xpu" and hasattr(torch.xpu, "XPUGraph"):
            g = torch.xpu.XPUGraph()
            with torch.xpu.graph(g, pool=pool):
                fn()
            return StepGraph(g.replay, g)
        raise AnnaError(f"graph capture is not available on {self.device}")

    def side_stream(self):
        """A context running the enclosed work on a fresh side stream (warm-up before capture);
        a no-op on CPU."""
        import contextlib

        if self._module is None:
            return contextlib.nullcontext()
        stream = self._module.Stream(self.device)
        stream.wait_stream(self._module.current_stream(self.device))

        @contextlib.contextmanager
        def _ctx():
            with self._module.stream(stream):
                yield
            self._module.current_stream(self.device).wait_stream(stream)

        return _ctx()

    def event(self) -> object | None:
        """A device event (``record()`` after enqueued work, ``synchronize()`` to wait for it); None on
        CPU, where enqueued work has finished when the call returns."""
        if self._module is None:
            return None
        return self._module.Event()

    def timer(self) -> StepTimer:
        """A stopwatch measuring device time (events on accelerators, the host clock on CPU)."""
        return StepTimer(self)

    def span(self) -> DeviceSpan:
        """A span of device work timed without waiting for it (:class:`DeviceSpan`)."""
        return DeviceSpan(self._module)

    def reset_peak_memory(self) -> None:
        if self._module is not None and hasattr(self._module, "reset_peak_memory_stats"):
            self._module.reset_peak_memory_stats(self.device)

    def peak_memory_bytes(self) -> int | None:
        """Peak bytes allocated by torch on the device since the last reset (None on CPU)."""
        if self._module is not None and hasattr(self._module, "max_memory_allocated"):
            return int(self._module.max_memory_allocated(self.device))
        return None

    def pin(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` in page-locked host memory where that speeds host -> device copies."""
        return t.pin_memory() if self.device.type == "cuda" else t

    def host_empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """An uninitialised host tensor, page-locked where that speeds host -> device copies (CUDA)."""
        return torch.empty(shape, dtype=dtype, pin_memory=self.device.type == "cuda")

    def copy_stream(self) -> CopyStream:
        """A side stream for asynchronous host -> device copies (:class:`CopyStream`)."""
        return CopyStream(self._module, self.device)


class CopyStream:
    """A side stream for host -> device copies that overlap the compute stream's work.

    ``with stream:`` enqueues the enclosed copies on it (they return at once when the source is pinned and
    ``non_blocking=True``); :meth:`join` makes the current (compute) stream wait for everything enqueued so
    far, without blocking the host. On the CPU there is no stream: copies run when issued and both are no-ops.
    """

    def __init__(self, module: object | None, device: torch.device):
        self._module = module
        self._stream = module.Stream(device) if module is not None else None
        self._device = device

    def __enter__(self) -> CopyStream:
        if self._stream is not None:
            self._ctx = self._module.stream(self._stream)
            self._ctx.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._stream is not None:
            self._ctx.__exit__(*exc)

    def join(self) -> None:
        """The current stream waits (on the device) for the copies enqueued so far."""
        if self._stream is not None:
            self._module.current_stream(self._device).wait_stream(self._stream)

    def after_current(self) -> None:
        """Copies enqueued from now on wait (on the device) for the current stream's work so far."""
        if self._stream is not None:
            self._stream.wait_stream(self._module.current_stream(self._device))


class StepTimer:
    """``start()`` / ``stop()`` -> elapsed milliseconds of device work (synchronizes on ``stop``)."""

    def __init__(self, accel: Accelerator):
        self._accel = accel
        mod = accel._module
        self._events = (mod.Event(enable_timing=True), mod.Event(enable_timing=True)) if mod is not None else None
        self._t0 = 0.0

    def start(self) -> None:
        if self._events is not None:
            self._events[0].record()
        else:
            import time

            self._t0 = time.perf_counter()

    def stop(self) -> float:
        if self._events is not None:
            self._events[1].record()
            self._events[1].synchronize()
            return float(self._events[0].elapsed_time(self._events[1]))
        import time

        return (time.perf_counter() - self._t0) * 1e3


class DeviceSpan:
    """The device time of the work enqueued between ``start()`` and ``stop()``, read without blocking.

    On an accelerator both calls record a timing event on the current stream and return at once; :meth:`elapsed_ms`
    is the milliseconds between the two events once the device has passed the second (None before: it asks the
    event, it never waits), so a caller reads it after a synchronisation it does anyway. The figure covers
    everything the stream did between the events, including waiting for the host to enqueue work. On the CPU, where
    work has finished when the call returns, it is the host time between the two calls, known at ``stop()``.
    """

    def __init__(self, module: object | None):
        self._events = (module.Event(enable_timing=True), module.Event(enable_timing=True)) if module is not None else None
        self._host = [0.0, 0.0]

    def start(self) -> None:
        if self._events is not None:
            self._events[0].record()
        else:
            self._host[0] = time.perf_counter()

    def stop(self) -> None:
        if self._events is not None:
            self._events[1].record()
        else:
            self._host[1] = time.perf_counter()

    def elapsed_ms(self) -> float | None:
        """Milliseconds from ``start()`` to ``stop()`` on the device, or None while the device has not reached
        ``stop()``'s event yet (never blocks)."""
        if self._events is None:
            return (self._host[1] - self._host[0]) * 1e3
        if not self._events[1].query():
            return None
        return float(self._events[0].elapsed_time(self._events[1]))


def accelerator(device: torch.device | str) -> Accelerator:
    """The :class:`Accelerator` of ``device``."""
    return Accelerator(torch.device(device))
