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

import os
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # tests.audio's fixture helpers
DEVICE = os.environ.get("DEVICE", "cuda")


def main() -> int:
    from anna_audio.qwen3_tts import build_prompt
    from anna_audio.qwen3_tts.engine_requests import FrameAssembler, engine_request, talker_params
    from anna_audio.qwen3_tts.generate import GREEDY
    from anna_audio.qwen3_tts.sampling import SpeechSampling
    from anna_audio.speech import task
    from anna_core.engine.config import EngineConfig
    from anna_core.engine.model_runner import RunnerConfig
    from anna_core.loading import load_model

    from tests.audio.test_qwen3_tts_talker import _requests
    from tests.audio.tts_golden import CHECKPOINTS, golden

    sampling = SpeechSampling(talker=GREEDY, predictor=GREEDY, repetition_penalty=1.05, max_new_tokens=24)
    g, facts = golden("custom_voice")
    failed = False
    for label, cfg in (("batched", dict(block_size=16, num_blocks=64)),
                       ("preempted", dict(block_size=4, num_blocks=20, max_prefill_tokens=16))):
        codes = {}
        for overlap in (False, True):
            loaded = load_model(CHECKPOINTS["custom_voice"], device=DEVICE, dtype="float32")
            loaded.model.predictor_sampling = GREEDY  # before the graphs capture the code predictor's choice
            built = task.build(loaded, EngineConfig(max_num_seqs=8, async_scheduling=overlap, **cfg),
                               RunnerConfig(cuda_graph=True, warmup=True))
            engine, model = built.engine, loaded.model
            with torch.inference_mode():
                prompts = {f"{case}/{row}": build_prompt(model.config, model.talker, model.predictor, request)
                           for case, row, request in sorted(_requests(facts["cases"], g),
                                                            key=lambda job: job[0] == "streaming_text")}
            frames = {}
            for rid, prompt in prompts.items():
                r = engine_request(prompt, model.placeholder_id, talker_params(sampling))
                engine.add_request(rid, r.prompt_ids, r.params, multimodal=r.multimodal)
                frames[rid] = FrameAssembler()
            while engine.has_unfinished():
                for out in engine.step():
                    if out.finish_reason == "error":
                        print(f"{label} overlap={overlap}: {out.request_id} failed: {out.error}")
                        failed = True
                    frames[out.request_id].feed(out)
            groups = model.config.talker.num_code_groups
            codes[overlap] = {rid: f.codes(groups) for rid, f in frames.items()}
            runner = engine.runner
            golden_ok = sum(torch.equal(c, g[f"{rid.split('/')[0]}/codes/{rid.split('/')[1]}"])
                            for rid, c in codes[overlap].items())
            print(f"{label} overlap={overlap}: decode graph steps {runner.num_graph_steps}, launched ahead "
                  f"{runner.num_launched_ahead}, eager {runner.num_eager_steps}, preemptions "
                  f"{engine.scheduler.num_preemptions}; golden codes equal {golden_ok}/{len(prompts)}")
            built.vocoder.close()
            del built, engine, model, loaded
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        same = [rid for rid in codes[True] if torch.equal(codes[True][rid], codes[False][rid])]
        print(f"{label}: overlapped codes equal the synchronous ones for {len(same)}/{len(codes[True])} requests")
        failed = failed or len(same) != len(codes[True])
    print("tts_overlap_check:", "FAILED" if failed else "ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
