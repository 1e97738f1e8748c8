"""Issue 27: the talker's overlapped decode steps on a real GPU (CUDA graphs, page-locked read-back, one stream), where
the CPU tests' fake graph accelerator cannot show a race: the tiny CustomVoice fixture (tests/audio/fixtures/qwen3_tts)
in float32, every golden case at once, then with a KV pool too small for them all (preemptions while a step is in
flight), each with asynchronous scheduling on and off. Prints, per scenario, whether the overlapped codes equal the
synchronous ones and the reference's golden codes, the decode graph steps and how many were launched ahead, and the
preemptions; exits 1 when the overlapped codes differ from the synchronous ones. Run from the repo root with the Anna
wheels installed (about 30-60 s; bound it)::

    timeout 150 python3 tools/gpu_experiments/tts_overlap_check.py | tee $OUT/tts_overlap_check.log

``DEVICE=cpu`` runs the same on the CPU (no graphs there: nothing is launched ahead), as a check of the script.
"""

from __future__ import annotations

import sys

import torch
from tts_check_setup import golden_prompts, greedy_codes, speech_engine


def main() -> int:
    from anna_core.engine.config import EngineConfig
    from anna_core.engine.model_runner import RunnerConfig

    from tests.audio.tts_golden import golden, golden_codes, speech_requests

    g, facts = golden("custom_voice")
    failed = False
    for label, cfg in (("batched", dict(block_size=16, num_blocks=64)),
                       ("preempted", dict(block_size=4, num_blocks=20, max_prefill_tokens=16))):
        codes = {}
        for overlap in (False, True):
            with speech_engine("custom_voice", EngineConfig(max_num_seqs=8, async_scheduling=overlap, **cfg),
                               RunnerConfig(cuda_graph=True, warmup=True)) as (engine, model):
                jobs = sorted(speech_requests(facts["cases"], g), key=lambda job: job[0] == "streaming_text")
                prompts = golden_prompts(model, jobs)
                codes[overlap], errors = greedy_codes(engine, model, prompts, f"{label} overlap={overlap}")
                failed = failed or errors
                runner = engine.runner
                golden_ok = sum(torch.equal(c, golden_codes(g, rid)) for rid, c in codes[overlap].items())
                print(f"{label} overlap={overlap}: decode graph steps {runner.num_graph_steps}, launched ahead "
                      f"{runner.num_launched_ahead}, eager {runner.num_eager_steps}, preemptions "
                      f"{engine.scheduler.num_preemptions}; golden codes equal {golden_ok}/{len(prompts)}")
        same = [rid for rid in codes[True] if torch.equal(codes[True][rid], codes[False][rid])]
        print(f"{label}: overlapped codes equal the synchronous ones for {len(same)}/{len(codes[True])} requests")
        failed = failed or len(same) != len(codes[True])
    print("tts_overlap_check:", "FAILED" if failed else "ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
