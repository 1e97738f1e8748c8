"""Failed steps: what kind of failure, when the engine gives up (degraded mode), and faults injected by tests.

A step that raises fails only its own requests (:meth:`~anna_core.engine.llm_engine.LLMEngine.step`: a step
already launched under asynchronous scheduling is read back first, the failed step's requests end with finish
reason ``"error"``, their blocks and slots return to the pools). A device out-of-memory also empties the
allocator's cache (:func:`anna_core.device.empty_cache`), and its requests end with error code
``"insufficient_memory"`` (HTTP 503, retryable). When the failed step computed prompt tokens and the error is an
out-of-memory (or ``"other"``), only the requests with prompt tokens in it fail: the others (decodes, prompt-cache
hits) are preempted by recompute (whatever KV the failed step wrote for them is dropped) and resume, their output
unchanged.

**Degraded mode.** :class:`StepFailures` counts failures in a row: at ``EngineConfig.max_consecutive_step_failures``
of them, or at once on an error that says the device is lost (:func:`classify_failure` ``"device"``: also a
:class:`~anna_core.errors.DeviceLostError`, e.g. a tensor-parallel rank that exited), the engine is *degraded*. Only failures of steps without new prompt tokens count toward the run (the device fails even for
established decodes); an out-of-memory or ``"other"`` failure of a step with prompt tokens does not (one client
retrying a prompt too large for the device must not degrade the server for everyone). A step that ran decodes
ends the run; a step of prompts alone does not. A failure counts once per engine step (a launched step that fails
to read back and the step that drains it are one failure). Degraded, the engine fails every request it holds
(error code ``"engine_degraded"``), refuses new ones (:class:`~anna_core.errors.EngineDegradedError`, HTTP 503),
``/health`` answers 503 and ``/healthz`` shows the reason, instead of crashing or serving what a broken device
computes. Only a restart leaves degraded mode.

:class:`FaultInjector` is the engine's collaborator for tests (``LLMEngine(faults=...)``): armed, it raises an
exception (a :class:`torch.OutOfMemoryError` by default) at a chosen step, as the device would.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from anna_core.errors import DeviceLostError

DEFAULT_MAX_CONSECUTIVE_STEP_FAILURES = 3
"""Failed steps in a row after which the engine is degraded (``EngineConfig.max_consecutive_step_failures``)."""

_DEVICE_LOST = ("device-side assert", "illegal memory access", "unspecified launch failure", "device lost",
                "ecc error", "cuda error: unknown error", "device not ready", "ur_result_error_device_lost",
                "uncorrectable")


def classify_failure(exc: BaseException) -> str:
    """``"oom"`` (a device out-of-memory: the step may succeed with less), ``"device"`` (the device is lost or
    its context corrupted: nothing more can run on it) or ``"other"`` (a failure of these requests)."""
    if isinstance(exc, torch.OutOfMemoryError):
        return "oom"
    if isinstance(exc, DeviceLostError):  # e.g. a tensor-parallel rank is gone
        return "device"
    accelerator_error = getattr(torch, "AcceleratorError", None)
    if accelerator_error is not None and isinstance(exc, accelerator_error):
        return "device"
    text = str(exc).lower()
    if "out of memory" in text:
        return "oom"
    if any(marker in text for marker in _DEVICE_LOST):
        return "device"
    return "other"


def short_description(exc: BaseException, limit: int = 120) -> str:
    """What a client is told of a failure: the exception's type and the first line of its message, cut at
    ``limit`` characters; an out-of-memory names no sizes (the full message goes to the server log)."""
    if classify_failure(exc) == "oom":
        return f"{type(exc).__name__} (the device ran out of memory)"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if len(text) > limit:
        text = text[:limit].rstrip() + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def failure_message(exc: BaseException) -> str:
    """The error a failed step's requests end with (an out-of-memory says so, for the client to retry)."""
    if classify_failure(exc) == "oom":  # the allocator's own message (sizes, addresses) stays in the log
        return "the device ran out of memory in this request's step; retry, or lower max_tokens"
    return short_description(exc)


def failure_code(exc: BaseException) -> str | None:
    """The error code of a failed step's requests: ``"insufficient_memory"`` for a device out-of-memory,
    ``"engine_degraded"`` for a lost device (it degrades the engine), else None (HTTP 500)."""
    return {"oom": "insufficient_memory", "device": "engine_degraded"}.get(classify_failure(exc))


class StepFailures:
    """Failed steps in a row and in all, and the degraded state.

    Args:
        max_consecutive: failures in a row that degrade the engine.
    """

    def __init__(self, max_consecutive: int = DEFAULT_MAX_CONSECUTIVE_STEP_FAILURES):
        self.max_consecutive = max_consecutive
        self.consecutive = 0
        self.total = 0
        self.oom = 0
        self.degraded: str | None = None

    def succeeded(self, decodes: bool = True) -> None:
        """A step ran; ``decodes``: it advanced established sequences (not only prompts), which ends a run of
        failures (a step of prompts alone says nothing about the decodes that failed)."""
        if decodes:
            self.consecutive = 0

    def failed(self, exc: BaseException, *, new_prompts: bool = False) -> str | None:
        """Count ``exc``; returns the reason the engine is degraded now (None: it keeps serving).

        ``new_prompts``: the failed step computed prompt tokens (its failing requests are new ones; the others
        were requeued). Such an out-of-memory or ``"other"`` failure is counted in :attr:`total` but not toward
        degraded mode (:attr:`consecutive` is left as it is): one client retrying a request too large for the
        device must not degrade the server for everyone. Only a ``"device"`` failure, or failures in a row of
        steps without a prompt (established decodes fail), degrade the engine."""
        kind = classify_failure(exc)
        self.total += 1
        self.oom += kind == "oom"
        if new_prompts and kind != "device":
            return self.degraded
        self.consecutive += 1
        if self.degraded is None:
            if kind == "device":
                self.degraded = f"the device failed: {short_description(exc)}"
            elif self.consecutive >= self.max_consecutive:
                self.degraded = f"{self.consecutive} steps failed in a row; last: {short_description(exc)}"
        return self.degraded

    def report(self) -> dict[str, int | str | None]:
        """For ``/healthz`` (``engine.step_failures``)."""
        return {"total": self.total, "out_of_memory": self.oom, "consecutive": self.consecutive,
                "degraded": self.degraded}


def injected_oom() -> BaseException:
    """The default injected fault: what the CUDA allocator raises when it cannot allocate."""
    return torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (injected fault)")


class FaultInjector:
    """Raises armed faults at engine steps (tests; the engine calls :meth:`check` before it runs a model step).

    Steps are counted as :attr:`LLMEngine.num_steps <anna_core.engine.llm_engine.LLMEngine.num_steps>` counts
    them (1 for the first step that runs the model).
    """

    def __init__(self) -> None:
        self._at: dict[int, Callable[[], BaseException]] = {}
        self._next = 0
        self._next_fault: Callable[[], BaseException] = injected_oom
        self.raised = 0

    def arm(self, step: int, fault: Callable[[], BaseException] = injected_oom) -> None:
        """Raise ``fault()`` at step ``step``."""
        self._at[step] = fault

    def arm_next(self, count: int = 1, fault: Callable[[], BaseException] = injected_oom) -> None:
        """Raise ``fault()`` at each of the next ``count`` model steps."""
        self._next, self._next_fault = count, fault

    def check(self, step: int) -> None:
        """Raise the fault armed for ``step``, if any (each armed fault fires once)."""
        fault = self._at.pop(step, None)
        if fault is None and self._next:
            self._next -= 1
            fault = self._next_fault
        if fault is not None:
            self.raised += 1
            raise fault()
