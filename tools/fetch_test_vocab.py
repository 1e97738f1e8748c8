#!/usr/bin/env python3
"""Put the vocabulary files the tests read into the test-data folder (run by ``tools/install.sh``
with ``ANNA_DEV=1``; the tests themselves never touch the network).

llama.cpp keeps tokenizer test vocabularies (``models/ggml-vocab-*.gguf``, GGUF files holding only a
tokenizer and its chat template) with their test vectors (``.inp`` inputs, ``.out`` expected ids);
the ``llama-cpp-python`` sdist vendors them. This script downloads the pinned sdist with pip (hash
checked; nothing is built or installed), extracts only :data:`FILES` and checks each one's sha256.
Files already in place with the right hash are kept, so a second run does nothing.

    python tools/fetch_test_vocab.py [--dest DIR]   (default: $ANNA_TEST_DATA or <checkout>/.test-data)

Exit status 1 with a message when a download or a hash check fails.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

PACKAGE = "llama-cpp-python"
VERSION = "0.3.36"
SDIST = f"llama_cpp_python-{VERSION}.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
MODELS = f"llama_cpp_python-{VERSION}/vendor/llama.cpp/models/"

FILES = {
    # name in the test-data folder: (member path under MODELS, sha256)
    "ggml-vocab-gemma-4.gguf": ("ggml-vocab-gemma-4.gguf",
                                "58b1ba0b57f3b4d7c468ba4ffd91ad85190346a3d7ad7e71d1cabaae8a14bb65"),
    "ggml-vocab-gemma-4.gguf.inp": ("ggml-vocab-gemma-4.gguf.inp",
                                    "0528aa007b06965f980181d252b5dff7bb170a77af6157bd48bba56885374448"),
    "ggml-vocab-gemma-4.gguf.out": ("ggml-vocab-gemma-4.gguf.out",
                                    "ba8c596bcd05e97e62566fa994b42eeaeffd6a4e4b4a4abe7b5b689aa6b43bf3"),
    # llama.cpp's later Gemma 4 template (OpenAI-style role "tool" messages become tool responses).
    "google-gemma-4-31B-it.jinja": ("templates/google-gemma-4-31B-it.jinja",
                                    "85a08664d16d8f3be4416c92427b3ac10df1024ac566cc0b4bc3bab409393f98"),
}
SUBDIR = f"{PACKAGE}-{VERSION}"


def default_dest() -> Path:
    """``$ANNA_TEST_DATA``, else ``.test-data`` in this checkout, with the sdist's subfolder."""
    root = os.environ.get("ANNA_TEST_DATA") or str(Path(__file__).resolve().parent.parent / ".test-data")
    return Path(root) / SUBDIR


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def missing(dest: Path) -> list[str]:
    """The names of :data:`FILES` absent from ``dest`` or with another hash."""
    return [name for name, (_, digest) in FILES.items()
            if not (dest / name).is_file() or sha256(dest / name) != digest]


def download_sdist(workdir: Path) -> Path:
    """The pinned sdist, downloaded by pip into ``workdir`` (its hash checked by pip and here)."""
    req = workdir / "requirements.txt"
    req.write_text(f"{PACKAGE}=={VERSION} --hash=sha256:{SDIST_SHA256}\n")
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
           "--no-binary", PACKAGE, "--require-hashes", "-r", str(req), "-d", str(workdir)]
    subprocess.run(cmd, check=True)
    sdist = workdir / SDIST
    if not sdist.is_file() or sha256(sdist) != SDIST_SHA256:
        raise RuntimeError(f"pip did not leave {SDIST} with sha256 {SDIST_SHA256} in {workdir}")
    return sdist


def extract(sdist: Path, dest: Path, names: list[str]) -> None:
    """Copy the members of ``names`` out of ``sdist`` into ``dest``, each checked before it is moved in."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist, "r:gz") as tar:
        for name in names:
            member, digest = FILES[name]
            src = tar.extractfile(MODELS + member)
            if src is None:
                raise RuntimeError(f"{MODELS + member} is not a file in {sdist.name}")
            tmp = dest / f".{name}.part"
            with tmp.open("wb") as out:
                while block := src.read(1 << 20):
                    out.write(block)
            if sha256(tmp) != digest:
                tmp.unlink()
                raise RuntimeError(f"{member} in {sdist.name} does not have sha256 {digest}")
            os.replace(tmp, dest / name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, default=None, help="target folder (default: %(default)s)")
    args = parser.parse_args(argv)
    dest = args.dest or default_dest()
    todo = missing(dest)
    if not todo:
        print(f"test vocabularies are in {dest}")
        return 0
    try:
        with tempfile.TemporaryDirectory(prefix="anna-vocab-") as tmp:
            extract(download_sdist(Path(tmp)), dest, todo)
    except (subprocess.CalledProcessError, RuntimeError, OSError, tarfile.TarError) as exc:
        print(f"fetch_test_vocab: {exc}", file=sys.stderr)
        return 1
    print(f"test vocabularies are in {dest} ({', '.join(todo)} from the {PACKAGE} {VERSION} sdist)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
