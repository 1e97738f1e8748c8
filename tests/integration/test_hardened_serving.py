"""``anna serve`` against slow clients and stops (issue 21): read deadlines, the connection limit,
the drain deadline and a forced stop, on a real server over the config-only dummy model."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time

import httpx
import pytest

from tests.bench.tiny_config import write_tiny_qwen35_config
from tests.integration.conftest import kill, start_server

pytestmark = [pytest.mark.slow, pytest.mark.integration]

LIMITS = ["--header-timeout-s", "1", "--body-timeout-s", "1", "--keep-alive-timeout-s", "1", "--max-connections", "6"]


@pytest.fixture(scope="module")
def dummy_folder(tmp_path_factory):
    return write_tiny_qwen35_config(tmp_path_factory.mktemp("dummy-cfg-hardened"))


def _serve(folder, tmp_path_factory, *extra: str):
    return start_server(["--model-dir", str(folder), "--load-format", "dummy", "--model-name", "dummy", *extra],
                        tmp_path_factory.mktemp("hardened-serve"), folder)


@pytest.fixture(scope="module")
def guarded_server(dummy_folder, tmp_path_factory):
    server = _serve(dummy_folder, tmp_path_factory, *LIMITS)
    yield server
    kill(server)


def _connect(base_url: str) -> socket.socket:
    host, port = base_url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10)


def _read_until_closed(sock: socket.socket, limit_s: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and when it closed (seconds)."""
    t0, data = time.monotonic(), b""
    sock.settimeout(limit_s)
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return data, time.monotonic() - t0
        data += chunk


def test_an_idle_connection_is_closed_at_the_header_timeout(guarded_server):
    with _connect(guarded_server.base_url) as sock:
        data, after = _read_until_closed(sock, limit_s=10)
    assert 0.8 < after < 4, after
    assert data.startswith(b"HTTP/1.1 408") and b'"request_timeout"' in data


def test_a_client_trickling_header_lines_is_cut_at_the_header_timeout(guarded_server):
    with _connect(guarded_server.base_url) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        t0 = time.monotonic()
        cut = None
        for i in range(40):  # one header line every 0.2 s: 8 s if nobody cuts
            try:
                sock.sendall(b"X-Slow-%d: x\r\n" % i)
            except OSError:
                cut = time.monotonic() - t0
                break
            sock.settimeout(0.2)
            try:
                answer = sock.recv(65536)  # the 408, or the close: either way the server cut the request
            except TimeoutError:
                continue
            cut = time.monotonic() - t0
            assert answer == b"" or answer.startswith(b"HTTP/1.1 408")
            break
        assert cut is not None and 0.5 < cut < 4, cut


def test_a_client_trickling_its_body_is_cut_at_the_body_timeout(guarded_server):
    with _connect(guarded_server.base_url) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{")
        t0 = time.monotonic()
        closed = False
        for _ in range(40):  # a body byte every 0.2 s
            time.sleep(0.2)
            try:
                sock.sendall(b" ")
                sock.settimeout(0.01)
                closed = sock.recv(65536) == b""
            except TimeoutError:
                continue
            except OSError:
                closed = True
            if closed:
                break
        assert closed and time.monotonic() - t0 < 4


def test_a_kept_alive_connection_serves_requests_within_the_deadlines(guarded_server):
    with _connect(guarded_server.base_url) as sock:
        for _ in range(3):  # the header deadline restarts with each request on the connection
            time.sleep(0.6)
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            sock.settimeout(5)
            answer = b""
            while not answer.endswith(b'{"status":"ready"}'):
                chunk = sock.recv(65536)
                assert chunk, answer
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200")
        data, after = _read_until_closed(sock, limit_s=10)  # then idle: closed at the keep-alive timeout
        assert data == b"" and after < 4


def test_connections_beyond_the_limit_get_a_json_503(guarded_server):
    socks = [_connect(guarded_server.base_url) for _ in range(6)]
    try:
        time.sleep(0.1)
        with _connect(guarded_server.base_url) as extra:
            data, _ = _read_until_closed(extra, limit_s=5)
        assert data.startswith(b"HTTP/1.1 503")
        body = json.loads(data.split(b"\r\n\r\n", 1)[1])
        assert body["error"]["code"] == "service_unavailable"
    finally:
        for s in socks:
            s.close()
    time.sleep(0.2)
    assert httpx.get(f"{guarded_server.base_url}/health", timeout=10).status_code == 200


def _stream_events(base_url: str, results: list, started: threading.Event) -> None:
    body = {"model": "dummy", "prompt": [1, 2, 3], "max_tokens": 3500, "ignore_eos": True, "stream": True}
    events: list[str] = []
    try:
        with httpx.stream("POST", f"{base_url}/v1/completions", json=body, timeout=60) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append(line[6:])
                    started.set()
        results.append(("ok", events))
    except httpx.HTTPError as exc:
        results.append(("broken", f"{type(exc).__name__}: {exc}", events))


def _start_streams(base_url: str, n: int) -> tuple[list, list[threading.Thread]]:
    results: list = []
    threads = []
    for _ in range(n):
        started = threading.Event()
        t = threading.Thread(target=_stream_events, args=(base_url, results, started), daemon=True)
        t.start()
        assert started.wait(30), "a stream did not start"
        threads.append(t)
    return results, threads


def _assert_every_stream_ended_with_an_error_event(results: list, n: int) -> None:
    assert len(results) == n, results
    for result in results:
        assert result[0] == "ok", result[:2]
        events = result[1]
        assert events[-1] == "[DONE]", events[-3:]
        last = json.loads(events[-2])
        assert last["error"]["type"] == "server_error" and last["error"]["code"] == "server_shutdown", last


def test_a_forced_stop_ends_every_stream_with_a_final_event_and_exits_non_zero(dummy_folder, tmp_path_factory):
    server = _serve(dummy_folder, tmp_path_factory, "--max-model-len", "4096")
    try:
        results, threads = _start_streams(server.base_url, 4)
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert server.proc.poll() is None  # draining: the streams still run
        server.proc.send_signal(signal.SIGTERM)
        code = server.proc.wait(timeout=30)
        for t in threads:
            t.join(timeout=10)
        assert code != 0
        _assert_every_stream_ended_with_an_error_event(results, 4)
        log = server.log()
        assert "Traceback" not in log and "CancelledError" not in log, log[-3000:]
        assert "stopped by a second signal" in log
    finally:
        kill(server)


def test_the_drain_timeout_ends_remaining_streams_and_exits_0(dummy_folder, tmp_path_factory):
    server = _serve(dummy_folder, tmp_path_factory, "--max-model-len", "4096", "--drain-timeout-s", "1")
    try:
        results, threads = _start_streams(server.base_url, 2)
        t0 = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        code = server.proc.wait(timeout=30)
        for t in threads:
            t.join(timeout=10)
        assert code == 0 and time.monotonic() - t0 < 15
        _assert_every_stream_ended_with_an_error_event(results, 2)
        log = server.log()
        assert "drain timeout" in log and "Traceback" not in log, log[-3000:]
    finally:
        kill(server)


def test_a_client_that_stops_reading_does_not_hold_a_forced_stop(dummy_folder, tmp_path_factory):
    server = _serve(dummy_folder, tmp_path_factory, "--max-model-len", "4096")
    host, port = server.base_url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        sock.connect((host, int(port)))
        body = json.dumps({"model": "dummy", "prompt": [1, 2, 3], "max_tokens": 3500, "ignore_eos": True,
                           "stream": True, "n": 4, "logprobs": 5}).encode()
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        time.sleep(4)  # never read: the server's sends back up and its handler blocks
        t0 = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        server.proc.send_signal(signal.SIGTERM)
        code = server.proc.wait(timeout=40)
        assert code != 0 and time.monotonic() - t0 < 25
        log = server.log()
        assert "Traceback" not in log, log[-3000:]
    finally:
        sock.close()
        kill(server)
