"""The one way audio decoding refuses an upload."""

from anna_core.errors import InvalidRequestError


def refuse(reason: str) -> InvalidRequestError:
    """The 400 error for a refused audio upload (the caller raises it).

    Args:
        reason: why, in words meant for the client.
    """
    return InvalidRequestError(f"audio refused: {reason}", param="file")
