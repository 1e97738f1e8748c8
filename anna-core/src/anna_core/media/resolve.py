"""Host name resolution under a time limit.

``socket.getaddrinfo`` takes no timeout (the system resolver's own retries can last tens of seconds), so the
resolver runs in a daemon thread and the fetch stops waiting for it after the limit; a late answer is dropped.
"""

import concurrent.futures
import threading

from anna_core.media.connection import Resolver
from anna_core.media.errors import refuse


def resolve_within(resolver: Resolver, host: str, port: int, timeout_s: float) -> list[str]:
    """``resolver(host, port)``, waited for at most ``timeout_s`` seconds.

    Args:
        resolver: ``(host, port) -> [ip, ...]``.
        host: host name.
        port: TCP port.
        timeout_s: seconds to wait for the answer.

    Raises:
        InvalidRequestError: resolution failed (``OSError``, ``UnicodeError``), took longer than ``timeout_s``,
            or gave no address.
    """
    answer: concurrent.futures.Future[list[str]] = concurrent.futures.Future()

    def run() -> None:
        try:
            answer.set_result(list(resolver(host, port)))
        except BaseException as e:  # handed to the waiting thread, which raises it
            answer.set_exception(e)

    threading.Thread(target=run, name="anna-media-resolve", daemon=True).start()
    try:
        ips = answer.result(timeout_s)
    except concurrent.futures.TimeoutError:
        raise refuse(f"resolving host {host!r} timed out after {timeout_s:.3g} s") from None
    except (OSError, UnicodeError) as e:
        raise refuse(f"cannot resolve host {host!r} ({e})") from None
    if not ips:
        raise refuse(f"host {host!r} resolves to no address")
    return ips
