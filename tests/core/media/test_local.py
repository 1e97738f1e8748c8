"""Local files: NUL bytes, FIFOs and a path swapped between its check and its open are 400s."""

import os
import threading

import pytest
from anna_core.errors import InvalidRequestError
from anna_core.media import MediaFetcher, MediaPolicy


def _refused(fn, *words):
    with pytest.raises(InvalidRequestError) as e:
        fn()
    assert e.value.param == "messages"
    for w in words:
        assert w in str(e.value), str(e.value)


@pytest.fixture
def root(tmp_path):
    d = tmp_path / "media"
    d.mkdir()
    (d / "a.bin").write_bytes(b"AAAA")
    (d / "b.bin").write_bytes(b"BBBB")
    return d.resolve()  # the fetcher resolves paths; the stat fakes below compare resolved ones


def test_nul_byte_in_path_is_a_400(root):
    f = MediaFetcher(MediaPolicy(allowed_local_media_path=root))
    _refused(lambda: f.fetch(f"file://{root}/a%00b"), "NUL byte")
    _refused(lambda: f.fetch(f"{root}/a\x00b"), "NUL byte")
    _refused(lambda: f.fetch("a.bin\x00"), "NUL byte")
    assert f.fetch(f"file://{root}/a.bin") == b"AAAA"


def _fetch_in_thread(fn):
    """Run ``fn`` in a daemon thread; (finished within 5 s, its exception or None)."""
    result = {}

    def run():
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - handed back to the test
            result["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(5.0)
    return not t.is_alive(), result.get("error")


def _unblock(fifo):
    """Let a reader stuck opening ``fifo`` go (a writer opens and closes it)."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


def test_fifo_refused_without_hanging(root):
    fifo = root / "pipe"
    os.mkfifo(fifo)
    f = MediaFetcher(MediaPolicy(allowed_local_media_path=root))
    done, error = _fetch_in_thread(lambda: f.fetch("pipe"))
    _unblock(fifo)
    assert done and isinstance(error, InvalidRequestError) and "not a regular file" in str(error), error


def test_fifo_swapped_in_after_the_check_refused_without_hanging(root, monkeypatch):
    """The check saw a regular file; by the open the path is a FIFO: the open must not block on it."""
    fifo = root / "pipe"
    os.mkfifo(fifo)
    real_stat = os.stat
    regular = real_stat(root / "a.bin")
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: regular if str(p) == str(fifo) else real_stat(p, *a, **k))
    f = MediaFetcher(MediaPolicy(allowed_local_media_path=root))
    done, error = _fetch_in_thread(lambda: f.fetch("pipe"))
    _unblock(fifo)
    assert done and isinstance(error, InvalidRequestError) and "not a regular file" in str(error), error


def test_file_swapped_after_the_check_refused(root, monkeypatch):
    """The check saw b.bin's inode at a.bin's path; the file opened is another one: refused."""
    real_stat = os.stat
    other = real_stat(root / "b.bin")
    target = str(root / "a.bin")
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: other if str(p) == target else real_stat(p, *a, **k))
    f = MediaFetcher(MediaPolicy(allowed_local_media_path=root))
    _refused(lambda: f.fetch("a.bin"), "changed while being opened")
