"""The soak-and-fuzz suite's sizes, hypothesis profiles and live server.

``ANNA_SOAK_SIZE`` picks the size: ``ci`` (the default: a reduced soak and bounded, derandomized
fuzzing, a few minutes on two cores) or ``full`` (the soak of 2,000 requests at concurrency 64 with
30% cancelled, and many more fuzz examples):

    ANNA_SOAK_SIZE=full python -m pytest tests/soak
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

SIZE = os.environ.get("ANNA_SOAK_SIZE", "ci")
if SIZE not in ("ci", "full"):
    raise pytest.UsageError(f"ANNA_SOAK_SIZE must be 'ci' or 'full', got {SIZE!r}")

MODEL_NAME = "tiny-qwen35"
MAX_MODEL_LEN = 512

# Each example is an HTTP round trip (or a parser run): no per-example deadline, no "too slow" check.
_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
           "print_blob": True}
settings.register_profile("ci", max_examples=60, derandomize=True, database=None, **_COMMON)
settings.register_profile("full", max_examples=1000, **_COMMON)


def examples(ci: int) -> settings:
    """Settings of a test that runs ``ci`` examples in CI (10x as many at the full size)."""
    return settings(settings.get_profile(SIZE), max_examples=ci if SIZE == "ci" else 10 * ci)


@pytest.fixture(scope="session")
def tiny_qwen35_dir(tmp_path_factory) -> Path:
    from anna_core.testing.checkpoints import build_tiny_qwen35

    return build_tiny_qwen35(tmp_path_factory.mktemp("tiny-qwen35-soak"))
