"""Where the tests find llama.cpp's Gemma 4 vocabulary (``tools/fetch_test_vocab.py`` puts it there at
install time), and the tokenizer built from it, converted once per test process.

Without the files a test is skipped, naming the command that fetches them -- except under CI
(``CI`` set), where the install step must have provided them and their absence is a failure.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

_FETCH = Path(__file__).resolve().parents[2] / "tools" / "fetch_test_vocab.py"
_tokenizer: Any = None


def fetch_module() -> Any:
    """``tools/fetch_test_vocab.py`` as a module (its pins and checks are the one definition)."""
    spec = importlib.util.spec_from_file_location("fetch_test_vocab", _FETCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def _checked_dir() -> tuple[Path, tuple[str, ...]]:
    fetch = fetch_module()
    dest = fetch.default_dest()
    return dest, tuple(fetch.missing(dest))


def gemma4_vocab_dir() -> Path:
    """The folder holding ``ggml-vocab-gemma-4.gguf`` and its test vectors, each hash-checked
    (skips the test, or fails it under CI, when they are not there)."""
    dest, absent = _checked_dir()
    if absent:
        why = (f"llama.cpp's Gemma 4 test vocabulary is not in {dest} (missing or changed: {', '.join(absent)}); "
               f"run: python tools/fetch_test_vocab.py")
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return dest


def gemma4_gguf() -> Path:
    return gemma4_vocab_dir() / "ggml-vocab-gemma-4.gguf"


def gemma4_tokenizer() -> Any:
    """Anna's tokenizer of the Gemma 4 GGUF (``anna_gemma4.tokenizer.load_gguf_vocabulary``), built
    once per process with a private cache folder."""
    global _tokenizer
    if _tokenizer is None:
        from anna_gemma4.tokenizer import load_gguf_vocabulary

        cache = Path(tempfile.mkdtemp(prefix="anna-gemma4-vocab-"))
        _tokenizer = load_gguf_vocabulary(gemma4_gguf(), cache=cache)
    return _tokenizer


def vectors() -> list[tuple[str, list[int]]]:
    """llama.cpp's test vectors: ``.inp`` inputs (split on ``__ggml_vocab_test__`` lines) with the
    ``.out`` lines of expected ids."""
    root = gemma4_vocab_dir()
    inputs = (root / "ggml-vocab-gemma-4.gguf.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    outputs = (root / "ggml-vocab-gemma-4.gguf.out").read_text(encoding="utf-8").split("\n")
    if outputs and outputs[-1] == "":
        outputs.pop()
    if len(inputs) != len(outputs):
        raise ValueError(f"{len(inputs)} inputs but {len(outputs)} expected outputs")
    return [(text, [int(t) for t in line.split()]) for text, line in zip(inputs, outputs)]
