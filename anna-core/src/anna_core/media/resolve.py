"""Host name resolution under a time limit.

``socket.getaddrinfo`` takes no timeout (the system resolver's own retries can last tens of seconds), so the
resolver runs in a daemon thread and the fetch stops waiting for it after the limit; a late answer is dropped.
The thread itself lives until the resolver returns, so the lookups in flight, abandoned ones included, are bounded
(:data:`MAX_PENDING_LOOKUPS` per fetcher): a flood of requests naming hosts that never answer cannot pile up
threads.
"""

import concurrent.futures
import threading

from anna_core.errors import QueueFullError
from anna_core.media.connection import Resolver
from anna_core.media.errors import refuse

MAX_PENDING_LOOKUPS = 64
"""Host lookups one :class:`~anna_core.media.MediaFetcher` lets run at once (each a thread until its resolver
returns)."""


def resolve_within(resolver: Resolver, host: str, port: int, timeout_s: float,
                   pending: threading.Semaphore | None = None) -> list[str]:
    """``resolver(host, port)``, waited for at most ``timeout_s`` seconds.

    Args:
        resolver: ``(host, port) -> [ip, ...]``.
        host: host name.
        port: TCP port.
        timeout_s: seconds to wait for the answer.
        pending: the lookups in flight (one acquired per lookup, released when its resolver returns, also after
            the wait gave up); None: unbounded.

    Raises:
        InvalidRequestError: resolution failed (``OSError``, ``UnicodeError``), took longer than ``timeout_s``,
            or gave no address.
        QueueFullError: every slot of ``pending`` is held by a lookup still running (429: retry later).
    """
    if pending is not None and not pending.acquire(blocking=False):
        raise QueueFullError("too many host lookups are still running (slow DNS); retry shortly", retry_after_s=5)
    answer: concurrent.futures.Future[list[str]] = concurrent.futures.Future()
    released = threading.Lock()  # held by whoever gives the slot back: exactly once

    def give_back() -> None:
        if pending is not None and released.acquire(blocking=False):
            pending.release()

    def run() -> None:
        try:
            result = list(resolver(host, port))
        except BaseException as e:  # handed to the waiting thread, which raises it
            give_back()  # before the waiter wakes: its next lookup finds the slot free
            answer.set_exception(e)
        else:
            give_back()
            answer.set_result(result)

    try:
        threading.Thread(target=run, name="anna-media-resolve", daemon=True).start()
    except BaseException:  # no thread (its slot would never come back), or one already running: once either way
        give_back()
        raise
    try:
        ips = answer.result(timeout_s)
    except concurrent.futures.TimeoutError:
        raise refuse(f"resolving host {host!r} timed out after {timeout_s:.3g} s") from None
    except (OSError, UnicodeError) as e:
        raise refuse(f"cannot resolve host {host!r} ({e})") from None
    if not ips:
        raise refuse(f"host {host!r} resolves to no address")
    return ips
