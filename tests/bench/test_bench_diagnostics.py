"""Benchmark diagnostics: the host profile of one prefill, the served-vs-eager token check."""

import pytest
import torch

from tests.bench.tiny_config import write_tiny_qwen35_config


def test_host_prefill_profile_prints_the_prefill_functions(tmp_path, monkeypatch, capsys):
    from anna_core.bench import prefill_profile
    from anna_core.bench.engine_bench import BenchSettings, build_engine
    from anna_core.loading import load_model

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)  # a GPU tool; nothing to wait for on CPU
    model_dir = write_tiny_qwen35_config(tmp_path)
    loaded = load_model(model_dir, device="cpu", dtype="fp32", load_format="dummy")
    s = BenchSettings(model_dir=model_dir, device="cpu", dtype="fp32", batch_size=1, input_len=12, output_len=2)
    engine = build_engine(loaded, s)
    prefill_profile.host_prefill_profile(engine, int(loaded.model.vocab_size), 12, 8)
    out = capsys.readouterr().out
    assert "host profile of one 12-token prefill: TTFT" in out
    assert "model_runner.py" in out and "execute" in out  # the engine's step is under the profile
    assert not engine.has_unfinished()


@pytest.mark.parametrize("syncs", [False, True])
def test_host_issue_times_the_forward_pass_and_says_whether_it_waited(tmp_path, monkeypatch, capsys, syncs):
    import time

    from anna_core.bench import prefill_profile
    from anna_core.bench.engine_bench import BenchSettings, build_engine
    from anna_core.loading import load_model

    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    queued = []  # device sleep queued (CPU: none runs; a "host sync" below waits it out)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: queued.append(cycles / 1.98e6))
    model_dir = write_tiny_qwen35_config(tmp_path)
    loaded = load_model(model_dir, device="cpu", dtype="fp32", load_format="dummy")
    s = BenchSettings(model_dir=model_dir, device="cpu", dtype="fp32", batch_size=1, input_len=12, output_len=2)
    engine = build_engine(loaded, s)
    forward = engine.runner.model.forward

    def forward_with_host_work(*args, **kwargs):
        time.sleep(0.02)  # the host's work for the pass
        if syncs and queued:  # a host sync waits for the queued device work
            time.sleep(queued.pop() * 1e-3)
        return forward(*args, **kwargs)

    monkeypatch.setattr(engine.runner.model, "forward", forward_with_host_work)
    # 2 s of queued sleep: the verdict threshold (1 s) sits far above a loaded CI machine's jitter (one pass of
    # this tiny model was seen taking 250 ms instead of ~25 ms there, which a 300 ms sleep's 150 ms threshold missed)
    prefill_profile.host_issue(engine, int(loaded.model.vocab_size), 12, busy_ms=2000.0)
    out = capsys.readouterr().out.splitlines()
    idle = float(out[0].split("device idle: ")[1].split(" ms")[0])
    assert 20.0 <= idle < 1000.0  # the pass's host time
    assert "2000 ms of device sleep queued first" in out[1]
    verdict = "waited for the device inside" if syncs else "did not wait for the device"
    assert f"(the forward pass {verdict})" in out[1]
    assert not engine.has_unfinished()


def test_served_vs_eager_runs_the_eager_loop_without_pdl(monkeypatch):
    import os

    from anna_core.bench import engine_bench
    from anna_core.bench.report import _served_check
    from anna_core.testing import runner

    seen = []

    def fake_greedy(model, prompts, n):
        seen.append(os.environ.get("ANNA_TRITON_PDL"))
        return [[1, 2, 3, 4][:n], [5, 6, 7, 8][:n]]

    monkeypatch.setattr(runner, "simple_greedy_batch", fake_greedy)
    monkeypatch.setenv("ANNA_TRITON_PDL", "1")
    assert engine_bench.served_vs_eager(None, [[0], [0]], [[1, 2, 3, 4], [5, 6, 9, 8]]) == 2  # the worst stream
    assert seen == ["0"] and os.environ["ANNA_TRITON_PDL"] == "1"  # off for the eager pass only
    assert engine_bench.served_vs_eager(None, [[0], [0]], [[1, 2], [5, 6]]) == 2
    assert "2/16" in _served_check({"output_len": 256, "served_vs_eager_match_tokens": 2})
    assert "MISMATCH" in _served_check({"output_len": 256, "served_vs_eager_match_tokens": 2})
    assert "(ok)" in _served_check({"output_len": 3, "served_vs_eager_match_tokens": 3})
