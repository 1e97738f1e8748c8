"""Issue 27: the golden codes through the served talker + code predictor on a real GPU with
``qk_norm_rope_cache_attention`` (``ANNA_QK_NORM_ROPE_ATTENTION``) off and on: the tiny golden checkpoints
(tests/audio/fixtures/qwen3_tts) in float32, every golden case at once, decode steps captured as CUDA graphs (a batch
of 3 or 5 requests runs in a bucket of 4 or 8: padding rows go through the fused kernel) and asynchronous scheduling
on, as ``anna serve`` runs them. The CPU tests run the op's Triton kernel interpreted and without graph padding rows;
this is the check the op needs before it can be the default. Prints, per checkpoint and switch, whether the talker's
and the predictor's layers took the fused op, the graph steps, and how many requests gave the reference's codes
exactly; exits 1 when a request fails, "on" matches fewer requests than "off", or (on a GPU) "on" left a layer
unfused or no decode step replayed a graph (on a GPU a rare near-tie may flip
a code in float32 even with the op off, so "off" is the bar, not 100%). Run from the repo root with the Anna wheels
installed (about 30-90 s; bound it)::

    timeout 150 python3 tools/gpu_experiments/tts_fused_golden_check.py | tee $OUT/tts_fused_golden_check.log

``DEVICE=cpu`` runs it on the CPU (no kernel is offered there: both arms take the two ops), as a check of the script.
"""

from __future__ import annotations

import os
import sys

import torch
from tts_check_setup import DEVICE, golden_prompts, greedy_codes, speech_engine


def main() -> int:
    from anna_core.engine.config import EngineConfig
    from anna_core.engine.model_runner import RunnerConfig

    from tests.audio.tts_golden import golden, golden_codes, speech_requests

    failed = False
    for kind in ("custom_voice", "voice_design", "base"):
        g, facts = golden(kind)
        equal = {}
        for value in ("0", "1"):
            os.environ["ANNA_QK_NORM_ROPE_ATTENTION"] = value
            label = f"{kind} op={'on' if value == '1' else 'off'}"
            with speech_engine(kind, EngineConfig(max_num_seqs=8, async_scheduling=True, block_size=16, num_blocks=64),
                               RunnerConfig(cuda_graph=True, warmup=True)) as (engine, model):
                talker_fused = sum(layer.norm_rope_cache_attend is not None for layer in model.layers)
                predictor_fused = model.frame_predictor.norm_rope_cache_attend is not None
                prompts = golden_prompts(model, speech_requests(facts["cases"], g))
                codes, errors = greedy_codes(engine, model, prompts, label)
                failed = failed or errors
                if DEVICE != "cpu" and value == "1" and not (talker_fused == len(model.layers) and predictor_fused):
                    print(f"{label}: the fused op did not serve every layer (the probe declined it)")
                    failed = True
                if DEVICE != "cpu" and engine.runner.num_graph_steps == 0:
                    print(f"{label}: no decode step ran from a captured graph")
                    failed = True
                equal[value] = sum(torch.equal(c, golden_codes(g, rid)) for rid, c in codes.items())
                runner = engine.runner
                print(f"{label}: talker layers fused {talker_fused}/{len(model.layers)}, predictor fused "
                      f"{predictor_fused}; decode graph steps {runner.num_graph_steps}, eager "
                      f"{runner.num_eager_steps}; golden codes equal {equal[value]}/{len(prompts)}", flush=True)
        failed = failed or equal["1"] < equal["0"]
    print("tts_fused_golden_check:", "FAILED" if failed else "ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
