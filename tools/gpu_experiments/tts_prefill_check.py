"""Issue 27: the talker's prompts on real prefill graphs (CUDA graphs), where the CPU tests' fake graph accelerator
cannot show a stale capture-time tensor: every tiny fixture kind (tests/audio/fixtures/qwen3_tts: Base with voice
cloning, CustomVoice, VoiceDesign) in float32, every golden case at once and the first alone, with prefill graphs on
and off (``RunnerConfig.prefill_graphs``; decode graphs on in both). Prints, per kind and mode, the prompts replayed
from prefill graphs, the decode graph and eager steps, and how many requests' codes equal the reference's golden
codes; then how many of the graph run's codes equal the eager prefill's. Exits 1 when a request's codes with prefill
graphs equal neither the eager prefill's nor the golden ones, or when no prompt replayed a prefill graph. Run from
the repo root with the Anna wheels installed (about 20-40 s; bound it)::

    timeout 60 python3 tools/gpu_experiments/tts_prefill_check.py | tee $OUT/tts_prefill_check.log

``DEVICE=cpu`` runs the same on the CPU (no graphs there: every prefill eager), as a check of the script.
"""

from __future__ import annotations

import sys

import torch
from tts_check_setup import DEVICE, golden_prompts, greedy_codes, speech_engine


def _run(kind: str, prefill_graphs: bool, facts, g):
    """``({request id: codes}, runner)`` of every golden case of ``kind`` at once, then the first again alone."""
    from anna_core.engine.config import EngineConfig
    from anna_core.engine.model_runner import RunnerConfig

    from tests.audio.tts_golden import speech_requests

    with speech_engine(kind, EngineConfig(max_num_seqs=8),
                       RunnerConfig(cuda_graph=True, warmup=True, prefill_graphs=prefill_graphs)) as (engine, model):
        prompts = golden_prompts(model, speech_requests(facts["cases"], g))
        codes = {}
        first = next(iter(prompts))
        for batch in (prompts, {f"{first}/alone": prompts[first]}):
            codes.update(greedy_codes(engine, model, batch, f"{kind} prefill_graphs={prefill_graphs}")[0])
        runner = engine.runner
        counts = (runner.num_prefill_graph_steps, runner.num_graph_steps, runner.num_eager_steps,
                  runner.graph_report()["prefill"])
    return codes, counts


def main() -> int:
    from tests.audio.tts_golden import golden, golden_codes

    failed = False
    for kind in ("base", "custom_voice", "voice_design"):
        g, facts = golden(kind)
        runs = {}
        for on in (True, False):
            codes, (prefill, decode, eager, report) = _run(kind, on, facts, g)
            want = {rid: golden_codes(g, rid) for rid in codes}
            golden_ok = sum(torch.equal(c, want[rid]) for rid, c in codes.items())
            print(f"{kind} prefill_graphs={on}: prefill graph replays {prefill}, decode graph steps {decode}, eager "
                  f"{eager}; golden codes equal {golden_ok}/{len(codes)}; prefill graphs captured "
                  f"{report['captured']} {report['prompt_lengths']}" + (f" ({report['why_not']})" if report["why_not"]
                                                                         else ""))
            runs[on] = codes, want, prefill
            if on and DEVICE != "cpu" and prefill == 0:
                print(f"{kind}: no prompt replayed a prefill graph")
                failed = True
        (graph, want, _), (eager, _, _) = runs[True], runs[False]
        same = [rid for rid in graph if torch.equal(graph[rid], eager[rid])]
        bad = [rid for rid in graph if rid not in same and not torch.equal(graph[rid], want[rid])]
        print(f"{kind}: codes with prefill graphs equal the eager prefill's for {len(same)}/{len(graph)} requests"
              + (f"; equal to neither it nor the golden codes: {bad}" if bad else ""))
        failed = failed or bool(bad)
    print("tts_prefill_check:", "FAILED" if failed else "ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
