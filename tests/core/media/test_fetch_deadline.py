"""total_timeout_s bounds a whole fetch: resolving, connecting, headers, body and every redirect hop."""

import socket
import threading
import time

import pytest
from anna_core.media import MediaFetcher, MediaPolicy

from tests.core.media.test_fetch import make, png, refused


@pytest.mark.parametrize("in_headers", [True, False], ids=["status-and-headers", "body"])
def test_slow_drip_is_cut_at_total_timeout(server, in_headers):
    # one byte every 0.2 s: no single read waits read_timeout_s (5 s), yet the fetch must end at 1 s
    server.drip("/drip", 0.2, in_headers=in_headers)
    f = make(server, total_timeout_s=1.0, read_timeout_s=5.0)
    start = time.monotonic()
    refused(lambda: f.fetch("http://public.test/drip"), "timed out", "total_timeout_s=1.0")
    elapsed = time.monotonic() - start
    assert 0.9 <= elapsed < 1.8, elapsed


def test_silent_server_is_cut_at_total_timeout_not_read_timeout(server):
    server.slow("/slow", 3.0)
    f = make(server, total_timeout_s=0.5, read_timeout_s=10.0)
    start = time.monotonic()
    refused(lambda: f.fetch("http://public.test/slow"), "timed out", "total_timeout_s=0.5")
    assert time.monotonic() - start < 1.5


def test_read_timeout_still_applies_below_the_total(server):
    server.slow("/slow", 3.0)
    f = make(server, total_timeout_s=20.0, read_timeout_s=0.3)
    start = time.monotonic()
    refused(lambda: f.fetch("http://public.test/slow"), "timed out", "read_timeout_s=0.3")
    assert time.monotonic() - start < 1.5


def test_connect_waits_at_most_the_time_left(server):
    server.body("/a.png", png())
    timeouts = []

    def connector(ip, port, timeout):
        timeouts.append(timeout)
        return socket.create_connection(("127.0.0.1", server.port), timeout)

    f = MediaFetcher(MediaPolicy(total_timeout_s=0.5, connect_timeout_s=5.0),
                     resolver=lambda host, port: ["93.184.216.34"], connector=connector)
    assert f.fetch("http://public.test/a.png") == png()
    assert len(timeouts) == 1 and 0 < timeouts[0] <= 0.5


def test_tls_handshake_is_cut_at_total_timeout():
    # a TCP server that accepts and never answers the ClientHello; the real TLS context waits for it
    listener = socket.create_server(("127.0.0.1", 0))
    accepted = []
    threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True).start()
    f = MediaFetcher(MediaPolicy(total_timeout_s=0.5, read_timeout_s=10.0),
                     resolver=lambda host, port: ["93.184.216.34"],
                     connector=lambda ip, port, timeout: socket.create_connection(listener.getsockname(), timeout))
    start = time.monotonic()
    try:
        refused(lambda: f.fetch("https://public.test/a.png"), "timed out", "total_timeout_s=0.5")
        assert time.monotonic() - start < 1.5
        assert len(accepted) == 1
    finally:
        listener.close()
        for conn, _addr in accepted:
            conn.close()


def test_deadline_checked_between_redirect_hops(server):
    now = [0.0]

    def slow_redirect(h):
        now[0] += 10.0  # this hop "took" 10 s on the fetcher's clock
        h.send_response(302)
        h.send_header("Location", "/a.png")
        h.send_header("Content-Length", "0")
        h.end_headers()

    server.routes["/r"] = slow_redirect
    server.body("/a.png", png())
    connected = []
    f = make(server, connected, total_timeout_s=5.0)
    f.clock = lambda: now[0]
    refused(lambda: f.fetch("http://public.test/r"), "timed out", "total_timeout_s=5.0")
    assert [path for path, _host in server.requests] == ["/r"]
    assert len(connected) == 1


def test_total_timeout_from_clock(server):
    server.body("/a", b"z" * 10)
    f = make(server, total_timeout_s=1.0)
    ticks = iter([0.0])
    f.clock = lambda: next(ticks, 100.0)  # the deadline is set at 0.0; every later look finds it passed
    refused(lambda: f.fetch("http://public.test/a"), "timed out")
    assert server.requests == []


def test_slow_resolver_is_cut_at_total_timeout(server):
    release = threading.Event()

    def resolver(host, port):
        release.wait(10.0)
        return ["93.184.216.34"]

    f = MediaFetcher(MediaPolicy(total_timeout_s=0.5, connect_timeout_s=5.0), resolver=resolver,
                     connector=lambda ip, port, timeout: pytest.fail("must not connect"))
    start = time.monotonic()
    try:
        refused(lambda: f.fetch("http://public.test/a"), "resolving host 'public.test' timed out")
    finally:
        release.set()
    assert time.monotonic() - start < 1.5


def test_abandoned_lookups_are_bounded_and_their_slots_come_back():
    """A lookup the fetch gave up on keeps its thread until the resolver returns: with every slot held by one, a
    fetch is a 429 at once (no new thread); once the resolvers return, lookups run again."""
    from anna_core.errors import QueueFullError

    release = threading.Event()
    calls = []

    def resolver(host, port):
        calls.append(host)
        if host == "slow.test":
            release.wait(10.0)
        return []

    f = MediaFetcher(MediaPolicy(connect_timeout_s=0.2), resolver=resolver,
                     pending_lookups=threading.BoundedSemaphore(2))
    try:
        for _ in range(2):
            refused(lambda: f.fetch("http://slow.test/a"), "resolving host 'slow.test' timed out")
        with pytest.raises(QueueFullError, match="too many host lookups are still running"):
            f.fetch("http://other.test/a")
        assert calls == ["slow.test", "slow.test"]
    finally:
        release.set()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # the two threads return and give their slots back
        try:
            refused(lambda: f.fetch("http://other.test/a"), "resolves to no address")
            break
        except QueueFullError:
            time.sleep(0.01)
    assert calls[-1] == "other.test"
    assert MediaFetcher(MediaPolicy()).pending_lookups is not MediaFetcher(MediaPolicy()).pending_lookups


def test_a_finished_lookup_gives_its_slot_back_before_its_answer():
    """One caller after another never finds the slot of its own previous (finished) lookup still held, also with
    the threads switching as often as they can."""
    import sys

    from anna_core.media.resolve import resolve_within

    slots = threading.BoundedSemaphore(1)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for i in range(300):
            assert resolve_within(lambda host, port: ["93.184.216.34"], "a.test", 80, 5.0, slots) == ["93.184.216.34"]
            if i % 3 == 0:
                with pytest.raises(Exception, match="cannot resolve"):
                    resolve_within(lambda host, port: (_ for _ in ()).throw(OSError("no")), "a.test", 80, 5.0, slots)
    finally:
        sys.setswitchinterval(interval)


def test_resolver_failure_is_a_400():
    def resolver(host, port):
        raise socket.gaierror(-2, "Name or service not known")

    f = MediaFetcher(MediaPolicy(), resolver=resolver)
    refused(lambda: f.fetch("http://nowhere.test/a"), "cannot resolve host 'nowhere.test'", "not known")
    f = MediaFetcher(MediaPolicy(), resolver=lambda host, port: [])
    refused(lambda: f.fetch("http://nowhere.test/a"), "resolves to no address")
