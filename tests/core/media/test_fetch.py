"""MediaFetcher against a loopback server; the injected resolver decides what the address check sees."""

import base64
import io
import socket
import ssl

import pytest
from anna_core.errors import InvalidRequestError
from anna_core.media import MediaFetcher, MediaPolicy, decode_image
from PIL import Image

NAMES = {
    "public.test": ["93.184.216.34"],
    "loop.test": ["127.0.0.1"],
    "ten.test": ["10.0.0.1"],
    "lan.test": ["192.168.1.1"],
    "corp.test": ["172.16.0.1"],
    "meta.test": ["169.254.169.254"],
    "mcast.test": ["224.0.0.1"],
    "zero.test": ["0.0.0.0"],
    "v6loop.test": ["::1"],
    "v6link.test": ["fe80::1"],
    "mapped.test": ["::ffff:127.0.0.1"],
    "mixed.test": ["93.184.216.34", "10.0.0.1"],
    "sixtofour.test": ["2002:7f00:1::1"],
    "sixtofour-meta.test": ["2002:a9fe:a9fe::1"],
    "nat64.test": ["64:ff9b::7f00:1"],
    "lan-and-meta.test": ["192.168.1.1", "169.254.169.254"],
}


def png(w=4, h=3, color=(10, 200, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), color).save(buf, "PNG")
    return buf.getvalue()


def make(server, connected=None, **policy):
    def connector(ip, port, timeout):
        if connected is not None:
            connected.append((ip, port))
        return socket.create_connection(("127.0.0.1", server.port), timeout)

    return MediaFetcher(MediaPolicy(**policy), resolver=lambda host, port: NAMES[host], connector=connector)


def refused(fn, *words):
    with pytest.raises(InvalidRequestError) as e:
        fn()
    assert e.value.param == "messages"
    for w in words:
        assert w in str(e.value), str(e.value)
    return str(e.value)


def test_public_fetch_decodes_what_was_served_and_connects_to_checked_ip(server):
    server.body("/a.png", png())
    connected = []
    data = make(server, connected).fetch("http://public.test/a.png")
    img = decode_image(data, 1000)
    assert img.size == (4, 3) and img.getpixel((1, 1)) == (10, 200, 30)
    assert connected == [("93.184.216.34", 80)]
    assert server.requests == [("/a.png", "public.test")]


@pytest.mark.parametrize("host,reason", [
    ("loop.test", "loopback"), ("ten.test", "private"), ("lan.test", "private"), ("corp.test", "private"),
    ("meta.test", "link-local"), ("mcast.test", "multicast"), ("zero.test", "unspecified"),
    ("v6loop.test", "loopback"), ("v6link.test", "link-local"), ("mapped.test", "loopback"),
    ("mixed.test", "private"), ("sixtofour.test", "loopback address (embedded in a 6to4 address)"),
    ("sixtofour-meta.test", "link-local address (embedded in a 6to4 address)"),
    ("nat64.test", "loopback address (embedded in a NAT64 address)"),
])
def test_refused_addresses(server, host, reason):
    connected = []
    refused(lambda: make(server, connected).fetch(f"http://{host}/a.png"), reason)
    assert connected == []


def test_allowed_domains_let_private_host_through_and_exclude_others(server):
    server.body("/a.png", png())
    f = make(server, allowed_media_domains=("lan.test",))
    assert f.fetch("http://lan.test/a.png") == png()
    refused(lambda: f.fetch("http://public.test/a.png"), "allowed_media_domains")


@pytest.mark.parametrize("host,ip", [
    ("meta.test", "169.254.169.254"), ("lan-and-meta.test", "169.254.169.254"),
    ("sixtofour-meta.test", "2002:a9fe:a9fe::1"),
])
def test_allowed_domain_resolving_to_metadata_address_refused(server, host, ip):
    connected = []
    refused(lambda: make(server, connected, allowed_media_domains=(host,)).fetch(f"http://{host}/latest"),
            ip, "link-local")
    assert connected == []
    server.body("/latest", b"ok")
    assert make(server, allowed_media_domains=(host,), allow_private_media=True).fetch(f"http://{host}/latest") == b"ok"


def test_port_zero_refused(server):
    connected = []
    refused(lambda: make(server, connected).fetch("http://public.test:0/a.png"), "invalid port (0)")
    refused(lambda: make(server, connected).fetch("http://public.test:99999/a.png"), "invalid port")
    assert connected == []


def test_https_to_http_redirect_refused(server):
    server.redirect("/r", "http://public.test/a.png")
    server.body("/a.png", png())
    f = make(server)
    f.ssl_context = PlainContext()
    refused(lambda: f.fetch("https://public.test/r"), "https to plain http", "downgrade")
    assert [path for path, _host in server.requests] == ["/r"]
    server.redirect("/up", "https://public.test/a.png")
    assert f.fetch("http://public.test/up") == png()


def test_redirect_to_refused_address(server):
    server.redirect("/r", "http://meta.test/latest/meta-data")
    refused(lambda: make(server).fetch("http://public.test/r"), "169.254.169.254", "link-local")


def test_redirect_followed_and_limited(server):
    server.body("/a.png", png())
    server.redirect("/r1", "/a.png", 301)
    assert make(server).fetch("http://public.test/r1") == png()
    for i in range(5):
        server.redirect(f"/c{i}", f"/c{i + 1}")
    refused(lambda: make(server, max_redirects=3).fetch("http://public.test/c0"), "too many redirects")


def test_redirect_to_file_scheme_refused(server):
    server.redirect("/r", "file:///etc/passwd")
    refused(lambda: make(server).fetch("http://public.test/r"), "scheme")


def test_non_2xx_status(server):
    refused(lambda: make(server).fetch("http://public.test/missing"), "HTTP 404")


@pytest.mark.parametrize("content_length", [True, False])
def test_oversize_body(server, content_length):
    server.body("/big", b"x" * 200_000, content_length=content_length)
    refused(lambda: make(server, max_bytes_per_medium=100_000).fetch("http://public.test/big"), "byte limit")
    server.body("/ok", b"y" * 50_000, content_length=content_length)
    assert make(server, max_bytes_per_medium=100_000).fetch("http://public.test/ok") == b"y" * 50_000


def test_slow_server_times_out(server):
    server.slow("/slow", 1.0)
    refused(lambda: make(server, read_timeout_s=0.2).fetch("http://public.test/slow"), "timed out")


def test_request_budget_shared_by_session(server):
    server.body("/a", b"a" * 600)
    s = make(server, max_bytes_per_medium=1000, max_bytes_per_request=1000).session()
    assert s.fetch("http://public.test/a") == b"a" * 600
    refused(lambda: s.fetch("http://public.test/a"), "byte limit")
    assert s.budget.used_bytes == 600


def test_other_schemes_refused(server):
    refused(lambda: make(server).fetch("ftp://public.test/a"), "scheme")
    refused(lambda: make(server).fetch("gopher://public.test/a"), "scheme")


def test_https_wraps_checked_socket_with_host_name(server):
    server.body("/a.png", png())
    seen = []

    connected = []
    f = make(server, connected)
    f.ssl_context = PlainContext(seen)
    assert f.fetch("https://public.test/a.png") == png()
    assert seen == ["public.test"] and connected == [("93.184.216.34", 443)]


class PlainContext:
    """Stands in for an ``ssl.SSLContext``: records the host name and leaves the socket plain (HTTP underneath)."""

    verify_mode = ssl.CERT_REQUIRED
    check_hostname = True
    post_handshake_auth = None

    def __init__(self, seen=None):
        self.seen = [] if seen is None else seen

    def wrap_socket(self, sock, server_hostname=None):
        self.seen.append(server_hostname)
        return sock


def test_data_uri():
    f = MediaFetcher(MediaPolicy(max_bytes_per_medium=1000))
    assert f.fetch("data:image/png;base64," + base64.b64encode(png()).decode()) == png()
    assert f.fetch("data:text/plain,hi%20there") == b"hi there"
    refused(lambda: f.fetch("data:image/png;base64,@@@not base64"), "base64")
    refused(lambda: f.fetch("data:image/png;base64," + base64.b64encode(b"x" * 2000).decode()), "max_bytes")
    refused(lambda: f.fetch("data:nocomma"), "malformed")


def test_local_files(tmp_path):
    root = tmp_path / "media"
    root.mkdir()
    (root / "a.png").write_bytes(png())
    (tmp_path / "secret").write_bytes(b"secret")
    (root / "link").symlink_to(tmp_path / "secret")
    refused(lambda: MediaFetcher(MediaPolicy()).fetch(f"file://{root}/a.png"), "not allowed")
    refused(lambda: MediaFetcher(MediaPolicy()).fetch(str(root / "a.png")), "not allowed")
    f = MediaFetcher(MediaPolicy(allowed_local_media_path=root))
    assert f.fetch(f"file://{root}/a.png") == png()
    assert f.fetch("a.png") == png()
    refused(lambda: f.fetch(f"{root}/../secret"), "outside")
    refused(lambda: f.fetch(f"file://{root}/link"), "outside")
    refused(lambda: f.fetch(str(root)), "regular file")


@pytest.mark.parametrize("url", ["http://[::1/x.png", "http://[/", "file://[x/a"])
def test_malformed_urls_are_refusals_not_crashes(url):
    """urlsplit's ValueError (an unclosed IPv6 bracket) and http.client's UnicodeEncodeError (a non-ASCII request
    line) came out as 500s."""
    refused(lambda: MediaFetcher(MediaPolicy()).fetch(url), "malformed media URL")


def test_a_non_ascii_path_is_a_refusal(server):
    """A public host whose path (or a redirect's Location) holds raw non-ASCII text: http.client cannot write the
    request line."""
    server.body("/a.png", png())
    refused(lambda: make(server).fetch("http://public.test/caf\u00e9.png"), "malformed media URL")

