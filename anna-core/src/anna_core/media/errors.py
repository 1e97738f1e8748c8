"""The one way this package refuses a medium."""

from anna_core.errors import InvalidRequestError


def refuse(reason: str) -> InvalidRequestError:
    """Build the 400 error for a refused medium (the caller raises it).

    Args:
        reason: why, in words meant for the client.
    """
    return InvalidRequestError(f"media refused: {reason}", param="messages")
