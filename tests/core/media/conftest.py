"""Media tests: no connection may leave loopback, and a local HTTP server stands in for the Internet."""

import http.server
import ipaddress
import shutil
import socket
import ssl
import subprocess
import threading
import time

import pytest

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _loopback_only(address) -> None:
    host = address[0] if isinstance(address, tuple) else None
    if host is None:
        return  # AF_UNIX
    try:
        ok = ipaddress.ip_address(host).is_loopback
    except ValueError:
        ok = host == "localhost"
    if not ok:
        pytest.fail(f"test tried to connect to non-loopback address {address!r}")


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Fail the test on any socket connection other than to loopback."""

    def connect(self, address):
        _loopback_only(address)
        return _real_connect(self, address)

    def connect_ex(self, address):
        _loopback_only(address)
        return _real_connect_ex(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        srv = self.server
        srv.requests.append((self.path, self.headers.get("Host")))
        route = srv.routes.get(self.path.split("?")[0])
        if route is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        route(self)


class LocalServer:
    """A threaded HTTP server on 127.0.0.1; ``routes`` maps a path to ``handler(request_handler)``.

    With ``tls`` (a server-side ``ssl.SSLContext``) it speaks HTTPS.
    """

    def __init__(self, tls=None):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.httpd.daemon_threads = True
        self.httpd.routes = {}
        self.httpd.requests = []
        self.stopping = threading.Event()
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def routes(self):
        return self.httpd.routes

    @property
    def requests(self):
        return self.httpd.requests

    def body(self, path, data: bytes, status=200, content_length=True):
        def handle(h):
            h.send_response(status)
            if content_length:
                h.send_header("Content-Length", str(len(data)))
                h.end_headers()
                h.wfile.write(data)
            else:
                h.send_header("Transfer-Encoding", "chunked")
                h.end_headers()
                for i in range(0, len(data), 4096):
                    part = data[i : i + 4096]
                    h.wfile.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                h.wfile.write(b"0\r\n\r\n")

        self.routes[path] = handle

    def redirect(self, path, location, status=302):
        def handle(h):
            h.send_response(status)
            h.send_header("Location", location)
            h.send_header("Content-Length", "0")
            h.end_headers()

        self.routes[path] = handle

    def slow(self, path, delay_s, data=b"x" * 10):
        def handle(h):
            h.send_response(200)
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.flush()
            time.sleep(delay_s)
            try:
                h.wfile.write(data)
            except OSError:
                pass

        self.routes[path] = handle

    def drip(self, path, interval_s, *, in_headers: bool, limit=200):
        """Answer 200 one byte every ``interval_s`` seconds, in the headers or in the body, ``limit`` bytes."""
        stopping = self.stopping

        def handle(h):
            head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n" % limit
            h.wfile.write(head if in_headers else head + b"\r\n")
            pad = b"X-Pad: " + b"a" * limit if in_headers else b"b" * limit
            for i in range(limit):
                if stopping.wait(interval_s):
                    return
                try:
                    h.wfile.write(pad[i : i + 1])
                except OSError:
                    return

        self.routes[path] = handle

    def close(self):
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    srv = LocalServer()
    yield srv
    srv.close()


@pytest.fixture(scope="session")
def certificate(tmp_path_factory):
    """``(cert.pem, key.pem)``: a self-signed certificate for ``public.test``, made by the openssl tool."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command-line tool is not installed")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=public.test",
                    "-addext", "subjectAltName=DNS:public.test"], check=True, capture_output=True)
    return cert, key


@pytest.fixture
def tls_server(certificate):
    """A :class:`LocalServer` speaking HTTPS with :func:`certificate`."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(*certificate)
    srv = LocalServer(tls=ctx)
    yield srv
    srv.close()
