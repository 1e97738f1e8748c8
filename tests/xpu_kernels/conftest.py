"""Run anna-xpu-kernels' Triton kernels on CPU under Triton's interpreter.

Triton decides at ``@triton.jit`` time whether a kernel is interpreted and must keep one setting for
the life of the process, so ``TRITON_INTERPRET=1`` is set here, before anything imports triton. It
does not make the probes accept CPU tensors (that needs ``ANNA_TRITON_INTERPRET=1``, which the
registration tests set per test), so CPU model tests in the same session keep the torch references.
"""

import math
import os
import sys

import pytest

if "triton" not in sys.modules:
    os.environ["TRITON_INTERPRET"] = "1"


def pytest_sessionfinish(session, exitstatus):
    """Fail the session when kernel-test modules were skipped for want of the interpreter."""
    from tests.xpu_kernels._interp import NOT_INTERPRETED

    if NOT_INTERPRETED and session.exitstatus == 0:
        print(f"\nFAILED: {len(NOT_INTERPRETED)} kernel-test modules skipped: triton was imported before "
              "tests/xpu_kernels/conftest.py could set up its interpreter", file=sys.stderr)
        session.exitstatus = 1


@pytest.fixture
def poison_outputs(monkeypatch):
    """``torch.empty`` / ``torch.empty_like`` return NaN-filled float tensors during the test.

    The kernels allocate their outputs (and split workspaces) with these, so an element a kernel
    forgets to write stays NaN instead of holding a stale, possibly correct, value.
    """
    import torch

    real_empty, real_empty_like = torch.empty, torch.empty_like

    def _poison(t):
        if t.is_floating_point():
            t.fill_(math.nan)
        return t

    monkeypatch.setattr(torch, "empty", lambda *a, **k: _poison(real_empty(*a, **k)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: _poison(real_empty_like(*a, **k)))
