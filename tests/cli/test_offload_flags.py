"""The expert offload flags (``--offload-mode``, ``--resident-expert-layers`` / ``-indices``,
``--cached-experts-per-layer``, ``--expert-prefetch``) and ``--max-device-memory-gib`` in ``anna serve``,
``anna generate`` and ``anna bench``."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from anna_cli.engine_options import (
    OFFLOAD_OPTION_NAMES,
    engine_config_from_options,
    engine_options,
    offload_config_from_options,
    offload_options,
)
from anna_cli.main import build_cli
from anna_core.engine.offload import OffloadConfig, OffloadConfigError
from click.testing import CliRunner


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory) -> Path:
    from anna_qwen35.tiny import build_tiny_qwen35_moe

    return build_tiny_qwen35_moe(tmp_path_factory.mktemp("tiny-moe-cli"), num_experts=8, top_k=2)


def parsed(args):
    seen = {}

    @click.command()
    @engine_options
    @offload_options
    def cmd(**kwargs):
        assert set(OFFLOAD_OPTION_NAMES) <= set(kwargs)
        seen["engine"] = engine_config_from_options(**kwargs)
        seen["offload"] = offload_config_from_options(**kwargs)

    result = CliRunner().invoke(cmd, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return seen["engine"], seen["offload"]


def test_defaults():
    engine, offload = parsed([])
    assert offload == OffloadConfig() and engine.max_device_memory_gib is None


def test_every_flag_reaches_its_setting():
    engine, offload = parsed(["--offload-mode", "experts", "--resident-expert-layer-indices", "0,2-3",
                              "--cached-experts-per-layer", "16", "--no-expert-prefetch",
                              "--max-device-memory-gib", "24", "--kv-cache-memory-gib", "2"])
    assert offload == OffloadConfig(mode="experts", resident_layers=(0, 2, 3), cached_experts_per_layer=16,
                                    prefetch=False)
    assert engine.max_device_memory_gib == 24.0 and engine.kv_cache_memory_gib == 2.0
    _, offload = parsed(["--resident-expert-layers", "2", "--offload-mode", "none"])
    assert offload.resident_layers == (0, 1) and offload.mode == "none"


def test_bad_flags():
    with pytest.raises(OffloadConfigError, match="give one of them"):
        parsed(["--resident-expert-layers", "2", "--resident-expert-layer-indices", "0"])
    result = CliRunner().invoke(click.command()(offload_options(lambda **kw: None)), ["--offload-mode", "maybe"])
    assert result.exit_code == 2 and "'maybe' is not one of 'auto', 'none', 'experts'" in result.output
    result = CliRunner().invoke(click.command()(engine_options(lambda **kw: None)), ["--max-device-memory-gib", "0"])
    assert result.exit_code == 2
    for bad in ("nan", "inf"):  # click's FloatRange lets them through
        result = CliRunner().invoke(click.command()(engine_options(lambda **kw: None)), ["--max-device-memory-gib", bad])
        assert result.exit_code == 2 and "positive finite number" in result.output


@pytest.mark.slow
def test_generate_offloaded_gives_the_resident_tokens(moe_dir):
    base = ["generate", "--model-dir", str(moe_dir), "--prompt", "Hello there", "--raw", "--max-new-tokens", "5",
            "--temperature", "0", "--json", "--device", "cpu"]
    resident = CliRunner().invoke(build_cli(), [*base, "--offload-mode", "none"])
    offloaded = CliRunner().invoke(build_cli(), [*base, "--offload-mode", "experts", "--cached-experts-per-layer", "3",
                                                 "--resident-expert-layers", "1", "--max-device-memory-gib", "4"])
    assert resident.exit_code == 0 and offloaded.exit_code == 0, offloaded.output
    a, b = json.loads(resident.stdout), json.loads(offloaded.stdout)
    assert a["token_ids"] == b["token_ids"] and "expert_cache" not in a
    cache = b["expert_cache"]
    assert cache["cached_experts_per_layer"] == 3 and cache["resident_layers"] == [0]
    assert cache["offloaded_layers"] == [1, 2, 3] and cache["misses"] > 0


def test_generate_refuses_bad_offload_flags_in_one_line(moe_dir):
    result = CliRunner().invoke(build_cli(), ["generate", "--model-dir", str(moe_dir), "--prompt", "hi", "--device",
                                              "cpu", "--offload-mode", "experts", "--resident-expert-layer-indices",
                                              "9"])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: resident expert layer indices [9] are out of range"), result.stderr


@pytest.mark.slow
def test_bench_reports_tokens_sha256_and_the_cache(moe_dir):
    base = ["bench", "--model-dir", str(moe_dir), "--device", "cpu", "--input-len", "8", "--output-len", "4",
            "--runs", "1", "--warmup", "0", "--json"]
    resident = CliRunner().invoke(build_cli(), [*base, "--offload-mode", "none"])
    offloaded = CliRunner().invoke(build_cli(), [*base, "--offload-mode", "experts", "--cached-experts-per-layer", "2"])
    assert resident.exit_code == 0 and offloaded.exit_code == 0, offloaded.output
    a, b = json.loads(resident.stdout), json.loads(offloaded.stdout)
    assert len(a["tokens_sha256"]) == 64 and a["tokens_sha256"] == b["tokens_sha256"]
    assert "expert_cache" not in a and b["expert_cache"]["cached_experts_per_layer"] == 2
    assert b["expert_cache"]["hits"] + b["expert_cache"]["misses"] > 0
    from anna_core.bench.report import format_report

    text = format_report(b)
    assert f"tokens    sha256 {b['tokens_sha256']}" in text and "2 cached per layer: hit rate" in text
    # HF's side-by-side model needs the experts as parameters: refused in one line, before the runs
    refused = CliRunner().invoke(build_cli(), [*base, "--offload-mode", "experts", "--compare-hf"])
    assert refused.exit_code != 0 and "--compare-hf needs every expert on the device" in refused.output
    assert "Traceback" not in refused.output


def test_serve_passes_the_offload_settings_to_the_loader(moe_dir, monkeypatch):
    import anna_cli.serve as serve_mod
    from anna_core.errors import AnnaError

    seen = {}

    class Stop(serve_mod.BackgroundLoader):
        def __init__(self, state, task, path, load_kwargs, engine_config, *args, **kwargs):
            seen.update(load_kwargs=load_kwargs, engine_config=engine_config)
            raise AnnaError("stopped before loading")

    monkeypatch.setattr(serve_mod, "BackgroundLoader", Stop)
    result = CliRunner().invoke(build_cli(), ["serve", "--model-dir", str(moe_dir), "--device", "cpu",
                                              "--offload-mode", "experts", "--resident-expert-layers", "1",
                                              "--cached-experts-per-layer", "4", "--max-device-memory-gib", "3"])
    assert result.exit_code == 1 and "stopped before loading" in result.stderr
    kw = seen["load_kwargs"]
    assert kw["offload"] == OffloadConfig(mode="experts", resident_layers=(0,), cached_experts_per_layer=4)
    assert kw["max_device_memory_gib"] == 3.0 and seen["engine_config"].max_device_memory_gib == 3.0
