"""The runner's seam for a model that compiles its own batch-1 decode step on the CPU
(``ModelCapabilities.compiled_decode``): asked at set-up only with a ``compile_mode``, and its compile then
happens in a warm-up decode at set-up even where warm-up is off (as on the CPU)."""

from __future__ import annotations

import attrs
import pytest

from tests.core._tiny_family import write_tiny_config


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return write_tiny_config(tmp_path_factory.mktemp("tiny-compiled-decode"))


def _engine(model_dir):
    from anna_core.bench.engine_bench import engine_config
    from anna_core.engine.llm_engine import LLMEngine

    from tests.core._tiny_family import load_tiny

    return LLMEngine.from_loaded(load_tiny(model_dir), engine_config(2, 48, 64, block_size=4))


@pytest.mark.parametrize("compile_mode", ["none", "default", "max-autotune"])
@pytest.mark.parametrize("declared", [False, True])
def test_runner_sets_up_a_declared_compiled_decode_step(tiny_dir, compile_mode, declared):
    from anna_core.engine.model_runner import RunnerConfig

    engine = _engine(tiny_dir)
    runner, model = engine.runner, engine.runner.model
    asked, steps = [], []
    model.capabilities = attrs.evolve(model.capabilities, compiled_decode=declared)

    def compile_decode(caches, compile_fn):
        asked.append((caches, compile_fn))
        return True

    model.compile_decode = compile_decode
    forward = model.forward

    def recording_forward(batch, caches):
        steps.append(batch.is_decode)
        return forward(batch, caches)

    model.forward = recording_forward
    runner.setup(RunnerConfig(cuda_graph=False, compile_mode=compile_mode, warmup=False),
                 max_model_len=engine.max_model_len, max_num_seqs=2)
    if declared and compile_mode != "none":
        assert len(asked) == 1 and asked[0][0] is runner.caches and callable(asked[0][1])
        assert steps == [False, True]  # the warm-up's prefill, then its one decode step (where the compile happens)
        assert "warmup_s" in runner.startup
    else:
        assert asked == [] and steps == []  # nothing compiled, and no warm-up with warmup=False
