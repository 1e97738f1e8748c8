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
