"""Local files, read only from under an allowed directory."""

import os
import stat
import urllib.parse
import urllib.request
from pathlib import Path

from anna_core.media.errors import refuse


def local_path_of(url: str) -> str:
    """The filesystem path a ``file://`` URL or bare path names.

    Raises:
        InvalidRequestError: a ``file://`` URL names a remote host.
    """
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme.lower() != "file":
        return url
    if parsed.netloc not in ("", "localhost"):
        raise refuse(f"file:// URL with a remote host ({parsed.netloc!r})")
    return urllib.request.url2pathname(parsed.path)


def read_local_file(path: str, allowed_dir: Path | None, max_bytes: int) -> bytes:
    """Read ``path`` (relative paths are taken under ``allowed_dir``).

    The path is resolved (symlinks and ``..`` followed) and must then lie under the resolved ``allowed_dir``.
    The resolved path is opened without following a final symlink and without blocking (a FIFO cannot hang
    the read), and the opened file must be a regular file and the very file the resolved path named when it
    was checked (same device and inode), so a path swapped between the check and the open is refused.

    Args:
        path: filesystem path.
        allowed_dir: the directory local media may come from; ``None`` refuses every local file.
        max_bytes: bytes, cap on the file's size.

    Raises:
        InvalidRequestError: local media not allowed, a NUL byte in the path, path escapes ``allowed_dir``,
            not a regular file, changed while being opened, too large, or unreadable.
    """
    if allowed_dir is None:
        raise refuse("local files are not allowed (set allowed_local_media_path)")
    if "\x00" in path:
        raise refuse("local path contains a NUL byte")
    root = allowed_dir.resolve()
    try:
        target = (root / path).resolve()
    except (OSError, RuntimeError, ValueError) as e:
        raise refuse(f"cannot resolve local path ({e})") from None
    if not target.is_relative_to(root):
        raise refuse("local path lies outside allowed_local_media_path")
    data = _read_regular_file(target, max_bytes)
    if len(data) > max_bytes:
        raise refuse(f"local file exceeds max_bytes_per_medium ({max_bytes} bytes)")
    return data


def _read_regular_file(target: Path, max_bytes: int) -> bytes:
    """At most ``max_bytes + 1`` bytes of ``target``, which must stay the regular file it is when checked."""
    try:
        checked = os.stat(target)
    except OSError as e:
        raise refuse(f"cannot read local file ({e.strerror})") from None
    if not stat.S_ISREG(checked.st_mode):
        raise refuse("local path is not a regular file")
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise refuse(f"cannot read local file ({e.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        opened = os.fstat(f.fileno())
        if not stat.S_ISREG(opened.st_mode):
            raise refuse("local path is not a regular file")
        if (opened.st_dev, opened.st_ino) != (checked.st_dev, checked.st_ino):
            raise refuse("local file changed while being opened")
        try:
            return f.read(max_bytes + 1)
        except OSError as e:
            raise refuse(f"cannot read local file ({e.strerror})") from None
