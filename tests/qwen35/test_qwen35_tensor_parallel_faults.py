"""A tensor-parallel group's faults on the CPU (2 ranks over gloo, a tiny dense Qwen3.5): a group idle longer than
its collective timeout still serves, a worker that dies degrades the engine at the next step (requests then get
``EngineDegradedError``, which ``/health`` reports as 503), and a script that builds the group without a
``__main__`` guard is told to add one."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest
import torch
from anna_core import SamplingParams
from anna_core.distributed.launch import close_engine, load_engine
from anna_core.engine.config import EngineConfig
from anna_core.engine.model_runner import RunnerConfig
from anna_core.errors import EngineDegradedError
from anna_core.testing.tensor_parallel import generate_logged

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

GREEDY = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
TIMEOUT_S = 4.0
"""The group's collective timeout in these tests (the default is 600 s)."""


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from anna_qwen35.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("q35tpf"), variant="dense")


@pytest.fixture
def group(checkpoint):
    """``(engine, workers)`` of a 2-rank group whose collectives time out after :data:`TIMEOUT_S` (one thread per
    rank)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    _, engine, workers = load_engine(checkpoint, {"device": "cpu", "dtype": "fp32"}, "anna_core.tasks.generate:build",
                                     EngineConfig(num_blocks=64), RunnerConfig(cuda_graph=False, warmup=False),
                                     tensor_parallel_size=2, timeout_s=TIMEOUT_S)
    yield engine, workers
    close_engine(engine, workers)
    torch.set_num_threads(threads)


def _generate(engine, prompt):
    [(tokens, _)] = generate_logged(SimpleNamespace(engine=engine), [prompt], GREEDY)
    return tokens


def test_a_group_idle_longer_than_its_timeout_still_serves(group):
    engine, workers = group
    first = _generate(engine, [5, 6, 7, 8])
    assert len(first) == 4
    time.sleep(TIMEOUT_S + 2)  # the workers wait for the next plan all this time
    assert all(p.is_alive() for p in workers.processes)
    assert _generate(engine, [5, 6, 7, 8]) == first
    assert engine.degraded is None


def test_a_dead_worker_degrades_the_engine_at_the_next_step(group):
    engine, workers = group
    assert len(_generate(engine, [5, 6, 7])) == 4
    workers.processes[0].kill()
    workers.processes[0].join()
    engine.add_request("after-kill", [9, 10, 11], GREEDY)
    outs = []
    deadline = time.monotonic() + 60
    while engine.has_unfinished() and time.monotonic() < deadline:
        outs += engine.step()
    [out] = [o for o in outs if o.finished]
    assert out.finish_reason == "error" and out.error_code == "engine_degraded"
    assert "tensor-parallel" in engine.degraded
    assert engine.stats()["step_failures"]["degraded"] == engine.degraded
    with pytest.raises(EngineDegradedError):
        engine.add_request("refused", [1, 2], GREEDY)


def test_a_script_without_a_main_guard_is_told_to_add_one(checkpoint, tmp_path):
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent(f"""
        from anna_core import LLM
        LLM({str(checkpoint)!r}, device="cpu", dtype="fp32", num_blocks=16, tensor_parallel_size=2)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=150)
    assert done.returncode != 0
    assert 'rank 1 could not start' in done.stderr and 'if __name__ == "__main__":' in done.stderr
