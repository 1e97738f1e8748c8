"""Local files, read only from under an allowed directory."""

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

    Args:
        path: filesystem path.
        allowed_dir: the directory local media may come from; ``None`` refuses every local file.
        max_bytes: bytes, cap on the file's size.

    Raises:
        InvalidRequestError: local media not allowed, path escapes ``allowed_dir``, not a regular file, too
            large, or unreadable.
    """
    if allowed_dir is None:
        raise refuse("local files are not allowed (set allowed_local_media_path)")
    root = allowed_dir.resolve()
    try:
        target = (root / path).resolve()
    except (OSError, RuntimeError) as e:
        raise refuse(f"cannot resolve local path ({e})") from None
    if not target.is_relative_to(root):
        raise refuse("local path lies outside allowed_local_media_path")
    if not target.is_file():
        raise refuse("local path is not a regular file")
    try:
        with open(target, "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise refuse(f"cannot read local file ({e.strerror})") from None
    if len(data) > max_bytes:
        raise refuse(f"local file exceeds max_bytes_per_medium ({max_bytes} bytes)")
    return data
