"""The byte budget that the media of one request share."""

import attrs

from anna_core.media.errors import refuse


@attrs.define
class RequestBudget:
    """Bytes still allowed for one request's media.

    Attributes:
        limit_bytes: bytes, the whole request's cap (``MediaPolicy.max_bytes_per_request``).
        used_bytes: bytes charged so far.
    """

    limit_bytes: int
    used_bytes: int = 0

    @property
    def remaining_bytes(self) -> int:
        """Bytes that may still be charged."""
        return self.limit_bytes - self.used_bytes

    def charge(self, n: int) -> None:
        """Account ``n`` more bytes.

        Raises:
            InvalidRequestError: the request's media would exceed ``limit_bytes``.
        """
        if self.used_bytes + n > self.limit_bytes:
            raise refuse(f"the request's media exceed max_bytes_per_request ({self.limit_bytes} bytes)")
        self.used_bytes += n
