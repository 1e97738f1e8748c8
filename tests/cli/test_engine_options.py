"""``engine_options``: every scheduler / cache flag, profile-then-explicit-flag precedence."""

import click
import pytest
from anna_cli.engine_options import (
    ENGINE_OPTION_NAMES,
    engine_config_from_options,
    engine_options,
)
from anna_core.engine.config import EngineConfig
from anna_core.engine.profiles import PROFILES
from anna_core.errors import AnnaError
from click.testing import CliRunner


def config_for(args):
    seen = {}

    @click.command()
    @engine_options
    @click.option("--other", default=None)
    def cmd(**kwargs):
        assert set(ENGINE_OPTION_NAMES) <= set(kwargs)
        seen["config"] = engine_config_from_options(**kwargs, max_model_len=128)

    result = CliRunner().invoke(cmd, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return seen["config"]


def test_no_flags_keep_the_defaults():
    assert config_for([]) == EngineConfig(max_model_len=128)


def test_profile_sets_knobs_and_explicit_flags_override_it():
    cfg = config_for(["--scheduler-profile", "throughput", "--scheduler-max-batch-size", "7",
                      "--scheduler-batch-wait-ms", "0", "--no-scheduler-dynamic-token-budget"])
    want = PROFILES["throughput"]
    assert cfg.max_num_seqs == 7 and cfg.batch_wait_ms == 0.0 and cfg.dynamic_token_budget is False
    assert cfg.max_prefill_tokens == want["max_prefill_tokens"]
    assert cfg.max_waiting_requests == want["max_waiting_requests"]
    assert cfg.max_model_len == 128


def test_every_flag_reaches_its_field():
    cfg = config_for([
        "--scheduler-max-prefill-tokens", "512", "--prefill-chunk-size", "128", "--scheduler-max-decode-tokens",
        "9000", "--scheduler-max-queue-wait-ms", "300", "--scheduler-max-waiting-requests", "12",
        "--scheduler-dynamic-token-budget", "--request-timeout-s", "30", "--block-size", "32",
        "--num-kv-blocks", "100", "--kv-cache-memory-gib", "1.5", "--reserve-memory-mib", "256",
        "--disable-prefix-caching", "--snapshot-interval", "512", "--snapshot-memory-mib", "64",
        "--disable-prompt-cache",
    ])
    assert (cfg.max_prefill_tokens, cfg.prefill_chunk_size, cfg.max_decode_tokens) == (512, 128, 9000)
    assert (cfg.max_queue_wait_ms, cfg.max_waiting_requests, cfg.dynamic_token_budget) == (300, 12, True)
    assert (cfg.request_timeout_s, cfg.block_size, cfg.num_blocks) == (30, 32, 100)
    assert (cfg.kv_cache_memory_gib, cfg.reserve_memory_mib) == (1.5, 256)
    assert cfg.enable_prefix_caching is False and cfg.snapshot_interval == 512 and cfg.snapshot_memory_mib == 64
    assert cfg.prompt_cache_size == 0
    assert config_for(["--prompt-cache-size", "3"]).prompt_cache_size == 3


def test_inconsistent_values_raise():
    with pytest.raises(AnnaError, match="multiple of block_size"):
        engine_config_from_options(block_size=16, snapshot_interval=40)
    with pytest.raises(AnnaError, match="unknown scheduler profile"):
        engine_config_from_options(scheduler_profile="turbo")


def test_memory_admission_flags_reach_their_fields_and_keep_their_bounds():
    cfg = config_for(["--min-free-memory-mib", "512", "--max-estimated-usage-ratio", "0.25",
                      "--generation-memory-safety-factor", "1.5", "--max-consecutive-step-failures", "5"])
    assert (cfg.min_free_memory_mib, cfg.max_estimated_usage_ratio) == (512, 0.25)
    assert (cfg.generation_memory_safety_factor, cfg.max_consecutive_step_failures) == (1.5, 5)

    @click.command()
    @engine_options
    def cmd(**kwargs):
        engine_config_from_options(**kwargs)

    for bad in (["--max-estimated-usage-ratio", "0"], ["--max-estimated-usage-ratio", "1.5"],
                ["--generation-memory-safety-factor", "0.5"], ["--generation-memory-safety-factor", "inf"],
                ["--min-free-memory-mib", "-1"], ["--max-consecutive-step-failures", "0"],
                ["--generation-memory-safety-factor", "nan"],
                *([flag, value] for flag in ("--min-free-memory-mib", "--reserve-memory-mib", "--snapshot-memory-mib",
                                             "--kv-cache-memory-gib") for value in ("nan", "inf"))):
        result = CliRunner().invoke(cmd, bad)
        assert result.exit_code == 2 and ("finite" in result.output or bad[1] not in ("nan", "inf")), bad


@pytest.mark.parametrize("field", ["min_free_memory_mib", "reserve_memory_mib", "snapshot_memory_mib",
                                   "kv_cache_memory_gib", "batch_wait_ms"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_memory_sizes_must_be_finite(field, value):
    if field == "batch_wait_ms" and value == float("inf"):
        return  # only the memory sizes must be finite; NaN is refused everywhere
    with pytest.raises(AnnaError, match=field):
        EngineConfig(**{field: value})


def test_engine_options_carry_the_kv_cache_quantization_flags():
    from anna_cli.engine_options import engine_config_from_options

    cfg = engine_config_from_options(kv_cache_quantization="turboquant", kv_cache_quant_bits=3)
    assert (cfg.kv_cache_quantization, cfg.kv_cache_quant_bits) == ("turboquant", 3)
    assert engine_config_from_options().kv_cache_quantization == "none"
