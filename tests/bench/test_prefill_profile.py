"""The host profile of one prefill (``prefill_profile --host-prefill``) on the tiny CPU model."""

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
