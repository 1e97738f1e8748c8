"""HTTPS against a loopback TLS server: the certificate is checked against the URL's host name while the
connection goes to the checked address, and total_timeout_s bounds reads through TLS too."""

import socket
import ssl
import time

from anna_core.media import MediaFetcher, MediaPolicy

from tests.core.media.test_fetch import png, refused


def fetcher(server, certificate, **policy):
    ctx = ssl.create_default_context(cafile=str(certificate[0]))
    names = {"public.test": ["93.184.216.34"], "other.test": ["93.184.216.35"]}
    return MediaFetcher(MediaPolicy(**policy), resolver=lambda host, port: names[host],
                        connector=lambda ip, port, timeout: socket.create_connection(("127.0.0.1", server.port),
                                                                                     timeout),
                        ssl_context=ctx)


def test_https_fetch_verifies_the_host_name(tls_server, certificate):
    tls_server.body("/a.png", png())
    assert fetcher(tls_server, certificate).fetch("https://public.test/a.png") == png()
    assert tls_server.requests == [("/a.png", "public.test")]


def test_certificate_for_another_name_refused(tls_server, certificate):
    tls_server.body("/a.png", png())
    refused(lambda: fetcher(tls_server, certificate).fetch("https://other.test/a.png"),
            "SSLCertVerificationError", "other.test")
    assert tls_server.requests == []


def test_slow_drip_over_tls_is_cut_at_total_timeout(tls_server, certificate):
    tls_server.drip("/drip", 0.2, in_headers=False)
    start = time.monotonic()
    refused(lambda: fetcher(tls_server, certificate, total_timeout_s=1.0, read_timeout_s=5.0)
            .fetch("https://public.test/drip"), "timed out", "total_timeout_s=1.0")
    assert 0.9 <= time.monotonic() - start < 1.8
