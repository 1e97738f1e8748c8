"""Exceptions raised by anna-core. Each carries a message meant for the user."""


class AnnaError(Exception):
    """Base class of Anna's user-facing errors."""


class UnsupportedModelError(AnnaError):
    """No installed family serves this checkpoint's ``model_type`` / architecture."""


class ModelLoadError(AnnaError):
    """The checkpoint is missing, truncated, or its tensors do not match the model."""


class ModelNotInstalledError(AnnaError):
    """A default model's package is not installed (the message says what to install)."""


class KernelNotFoundError(AnnaError):
    """No registered implementation of a kernel op accepts the requested device/dtype/shape."""


class InvalidRequestError(AnnaError):
    """A request is malformed or exceeds a limit (maps to HTTP 400)."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.param = param
        self.code = code


class EngineDeadError(AnnaError):
    """The engine loop stopped; no further requests can be served."""


class EngineDegradedError(AnnaError):
    """The engine stopped taking requests after repeated step failures or a lost device (HTTP 503); it keeps
    answering ``/healthz`` (:mod:`anna_core.engine.faults`). Restart the process to recover."""

    code = "engine_degraded"


class DeviceLostError(AnnaError):
    """A device, or a rank of a tensor-parallel group, can run nothing more (a rank exited or stopped answering):
    the engine degrades at the step that finds it (:mod:`anna_core.engine.faults`). Restart the process to
    recover."""


class MemoryUnavailableError(AnnaError):
    """A request would fit the device's memory once running requests finish, not now (HTTP 503 with
    ``Retry-After``; :mod:`anna_core.engine.memory_admission`).

    Attributes:
        retry_after_s: whole seconds after which a retry may be admitted.
    """

    code = "insufficient_memory"

    def __init__(self, message: str, retry_after_s: int = 1):
        super().__init__(message)
        self.retry_after_s = retry_after_s


class QueueFullError(AnnaError):
    """The engine's waiting queue is full (``max_waiting_requests``); maps to HTTP 429.

    Attributes:
        retry_after_s: whole seconds after which a retry is likely to be admitted (for the
            ``Retry-After`` header).
    """

    def __init__(self, message: str, retry_after_s: int = 1):
        super().__init__(message)
        self.retry_after_s = retry_after_s
