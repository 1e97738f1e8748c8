"""MediaSession: one request's fetches share a media count and one deadline (max_request_seconds)."""

import base64
import time

import pytest
from anna_core.media import MediaPolicy

from tests.core.media.test_fetch import make, png, refused

DATA = "data:image/png;base64," + base64.b64encode(png()).decode()


def test_policy_validates_the_new_limits():
    assert (MediaPolicy().max_media_per_request, MediaPolicy().max_request_seconds) == (16, 60.0)
    for field in ("max_media_per_request", "max_request_seconds"):
        with pytest.raises(ValueError, match=field):
            MediaPolicy(**{field: 0})


def test_fetch_after_the_last_allowed_medium_refused(server):
    s = make(server, max_media_per_request=2).session()
    assert s.fetch(DATA) == png() and s.fetch(DATA) == png()
    refused(lambda: s.fetch(DATA), "more than max_media_per_request (2) media")
    assert make(server, max_media_per_request=2).session().fetch(DATA) == png()  # a new request counts anew


def test_fetch_started_after_the_request_deadline_refused(server):
    server.body("/a.png", png())
    now = [0.0]
    f = make(server, max_request_seconds=5.0, total_timeout_s=30.0)
    f.clock = lambda: now[0]
    s = f.session()
    now[0] = 4.0
    assert s.fetch("http://public.test/a.png") == png()
    now[0] = 5.5  # past the session's deadline, well within a new fetch's own total_timeout_s
    refused(lambda: s.fetch("http://public.test/a.png"), "timed out", "max_request_seconds=5.0")
    refused(lambda: s.fetch(DATA), "max_request_seconds=5.0")
    assert len(server.requests) == 1


def test_fetch_running_past_the_request_deadline_is_cut(server):
    server.drip("/drip", 0.2, in_headers=False)
    s = make(server, max_request_seconds=1.0, total_timeout_s=10.0, read_timeout_s=5.0).session()
    start = time.monotonic()
    refused(lambda: s.fetch("http://public.test/drip"), "timed out", "max_request_seconds=1.0")
    assert 0.9 <= time.monotonic() - start < 1.8


def test_fetches_of_one_request_share_the_deadline(server):
    server.slow("/slow", 1.0)
    server.drip("/drip", 0.2, in_headers=True)
    s = make(server, max_request_seconds=1.6, total_timeout_s=10.0, read_timeout_s=5.0).session()
    start = time.monotonic()
    assert s.fetch("http://public.test/slow") == b"x" * 10  # about 1 s of the 1.6
    second = time.monotonic()
    refused(lambda: s.fetch("http://public.test/drip"), "timed out", "max_request_seconds=1.6")
    end = time.monotonic()
    assert end - second < 1.0 and 1.5 <= end - start < 2.4, (second - start, end - start)
