"""``python -m anna_audio.tts_bench`` on the CPU with the tiny CustomVoice shape (random weights): every streamed
response holds exactly the fixed frames and the report's figures are consistent; the 1.7B shape folder parses; with
``--reference`` a stand-in ``qwen_tts`` runs in the same process after Anna's engine is released, at the same
frames and concurrency, and a missing one stops the benchmark at once."""

import gc
import importlib.util
import json
import sys
import types

import pytest
import torch
from anna_audio.qwen3_tts import load_config
from anna_audio.tts_bench import FRAME_S, main, run_bench, write_shape_folder
from anna_core.engine.llm_engine import LLMEngine
from anna_core.errors import AnnaError

from tests.audio.tts_golden import CHECKPOINTS

pytestmark = pytest.mark.slow  # starts a server or loads models (seconds each)


def test_bench_cpu_path():
    # a kernel to disable where anna-xpu-kernels is installed (the distribution checks install anna-audio without it)
    disabled = ("top_k_gumbel_sample:triton",) if importlib.util.find_spec("anna_xpu_kernels") else ()
    report = run_bench(CHECKPOINTS["custom_voice"], load_format="dummy", device="cpu", frames=6, concurrency=2,
                       runs=1, chunk_frames=(1, 4), disable_kernels=disabled, max_prefill_replays=1)
    assert report["disabled_kernels"] == list(disabled) and report["max_prefill_replays"] == 1
    assert report["client"] == "own process"  # the HTTP client in a spawned process of its own
    one, crowd = report["one"], report["concurrent"]
    assert report["frames"] == 6 and report["audio_s"] == pytest.approx(6 * FRAME_S)
    assert one["runs"][0]["bytes"] == 6 * 1920 * 2 and one["rtf"] == pytest.approx(one["latency_s"] / (6 * FRAME_S))
    assert 0 < one["first_audio_s"] < one["latency_s"]
    assert crowd["requests"] == 2 and crowd["latency_vs_one"] == pytest.approx(crowd["latency_s"]["mean"]
                                                                               / one["latency_s"])
    for stats in (crowd["latency_s"], crowd["first_audio_s"]):
        assert 0 < stats["min"] <= stats["p50"] <= stats["max"] and stats["min"] <= stats["mean"] <= stats["max"]
    assert crowd["first_audio_s"]["max"] < crowd["latency_s"]["min"]
    builds = crowd["prepare_s"]  # one prompt build per concurrent request, each before its first audio
    assert 0 < builds["min"] <= builds["max"] < crowd["first_audio_s"]["max"]
    assert builds["max"] <= builds["last_end"] < crowd["first_audio_s"]["max"]
    assert report["chunk_frames"] == [1, 4] and report["vocoder_calls"] >= 2
    steps = report["steps"]  # no graphs on the CPU: every step eager, none launched ahead
    assert steps["async_scheduling"] and steps["decode_graph"] == steps["launched_ahead"] == 0 and steps["eager"] > 0
    assert steps["prefill_graph"] == 0 and not report["prefill_graphs"]["captured"]
    assert report["prefill_graphs"]["model_supports"] and "cpu device" in report["prefill_graphs"]["why_not"]
    split = report["split"]  # on the CPU: no graphs, the predictor and vocoder timed eagerly
    assert not split["graphs"]["captured"] and "cpu device" in split["graphs"]["why_not"] and split["step_ms"] == {}
    assert set(split["predictor_ms"]) == set(split["vocoder_ms_per_frame"]) == {1, 2}
    assert split["vocoder_graphs"]["captured"] is False and "does not capture" in split["vocoder_graphs"]["why_not"]
    assert set(split["vocoder_eager_ms_per_frame"]) == {1, 2}
    assert all(v > 0 for v in split["vocoder_eager_ms_per_frame"].values())
    assert all(v > 0 for v in [*split["predictor_ms"].values(), *split["vocoder_ms_per_frame"].values()])
    inside = run_bench(CHECKPOINTS["custom_voice"], load_format="dummy", device="cpu", frames=2, concurrency=2, runs=1,
                       chunk_frames=(1, 4), client_process=False)  # the client in the server's process, as before
    assert inside["client"] == "server's process" and inside["one"]["runs"][0]["bytes"] == 2 * 1920 * 2
    with pytest.raises(ValueError):
        run_bench(CHECKPOINTS["custom_voice"], device="cpu", frames=0)
    with pytest.raises(AnnaError, match="unknown op 'no_such_op'"):
        run_bench(CHECKPOINTS["custom_voice"], device="cpu", frames=1, disable_kernels=("no_such_op:triton",))


def test_shape_folder_of_the_released_size(tmp_path):
    config = load_config(write_shape_folder("Qwen3-TTS-12Hz-1.7B-Base", tmp_path / "m"))
    assert config.kind == "base" and config.talker.shape.hidden_size == 2048
    assert config.talker.num_code_groups == 16 and config.codec.decoder.samples_per_frame == 1920


class _FakeReference:
    """Stand-ins for ``qwen_tts``'s classes (the real package does not import on the CPU machine): the model records
    its ``generate`` calls and returns ``max_new_tokens - 1`` frames of zeros per request, the decoder records what it
    decodes; building the model calls the rotary table's ``default`` on a config without ``rope_theta`` (the codec's
    case the benchmark's shim handles) and counts the Anna engines still alive."""

    def __init__(self, engines_before: set[int]):
        self.engines_before = engines_before
        self.generate_calls: list[dict] = []
        self.decoded: list[tuple[int, ...]] = []
        self.engines_alive_at_build: int | None = None
        self.rope_at_build = None
        fake = self

        class Config:
            def __init__(self, **kwargs):
                self.kwargs = kwargs

        class Model(torch.nn.Module):
            def __init__(self, config):
                super().__init__()
                from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

                self.weight = torch.nn.Parameter(torch.zeros(1))
                self.groups = config.kwargs["talker_config"]["num_code_groups"]
                fake.tts_model_type = config.kwargs["tts_model_type"]
                fake.engines_alive_at_build = sum(1 for o in gc.get_objects() if type(o) is LLMEngine
                                                  and id(o) not in fake.engines_before)
                mimi = types.SimpleNamespace(rope_parameters={"rope_theta": 100.0}, hidden_size=8,
                                             num_attention_heads=2)
                fake.rope_at_build = ROPE_INIT_FUNCTIONS["default"](mimi)[0]

            def generate(self, *, input_ids, max_new_tokens, **kwargs):
                fake.generate_calls.append({"n": len(input_ids), "max_new_tokens": max_new_tokens,
                                            "lengths": [int(i.shape[1]) for i in input_ids], **kwargs})
                codes = [torch.zeros(max_new_tokens - 1, self.groups, dtype=torch.int64) for _ in input_ids]
                return codes, [None] * len(input_ids)

        class Decoder(torch.nn.Module):
            def chunked_decode(self, codes):
                fake.decoded.append(tuple(codes.shape))
                return torch.zeros(1, 1, codes.shape[-1] * 1920)

        class Codec:
            def __init__(self, config):
                self.decoder = Decoder()

        self.modules = {"qwen_tts": types.ModuleType("qwen_tts"), "qwen_tts.core": types.ModuleType("qwen_tts.core"),
                        "qwen_tts.core.models": types.ModuleType("qwen_tts.core.models")}
        self.modules["qwen_tts.core"].Qwen3TTSTokenizerV2Config = Config
        self.modules["qwen_tts.core"].Qwen3TTSTokenizerV2Model = Codec
        self.modules["qwen_tts.core.models"].Qwen3TTSConfig = Config
        self.modules["qwen_tts.core.models"].Qwen3TTSForConditionalGeneration = Model


def test_reference_runs_in_the_same_process_after_anna_is_released(tmp_path, monkeypatch):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    fake = _FakeReference({id(o) for o in gc.get_objects() if type(o) is LLMEngine})
    for name, module in fake.modules.items():
        monkeypatch.setitem(sys.modules, name, module)

    def package_default(config, device=None, seq_len=None, layer_type=None):  # qwen_tts's: reads rope_theta
        return 1.0 / config.rope_theta ** torch.arange(0, 8, 2).float() / 8, 1.0

    monkeypatch.setitem(ROPE_INIT_FUNCTIONS, "default", package_default)
    out = tmp_path / "report.json"
    main(["--model-dir", str(CHECKPOINTS["custom_voice"]), "--device", "cpu", "--frames", "3", "--concurrency", "2",
          "--runs", "1", "--chunk-frames", "1,2", "--reference", "--out", str(out)])
    report = json.loads(out.read_text())
    assert fake.engines_alive_at_build == 0  # Anna's engine was gone before the reference was built
    assert ROPE_INIT_FUNCTIONS["default"] is package_default  # the shim was scoped to the build
    assert torch.allclose(fake.rope_at_build, 1.0 / 100.0 ** (torch.arange(0, 4, 2).float() / 4))
    assert fake.tts_model_type == "voice_design"
    config = json.loads((CHECKPOINTS["custom_voice"] / "config.json").read_text())
    # warm-up, one single run, then both requests in one call; each runs frames + 1 talker steps, never stopping
    assert [(c["n"], c["max_new_tokens"]) for c in fake.generate_calls] == [(1, 4), (1, 4), (2, 4)]
    assert all(c["eos_token_id"] == config["talker_config"]["codec_pad_id"] and c["non_streaming_mode"]
               and c["temperature"] == 0.9 and c["repetition_penalty"] == 1.05 for c in fake.generate_calls)
    assert fake.generate_calls[0]["lengths"] == [32 + 8]  # the bench's 32 text tokens inside the chat wrapping
    assert fake.decoded == [(1, 4, 3)] * 4  # [1, G, F] per request: warm-up, single, the call of two
    ref, anna = report["reference"], report["one"]
    assert ref["frames"] == 3 and ref["streamed"] is False and ref["dtype"] == "float32"
    assert ref["one"]["first_audio_s"] == ref["one"]["latency_s"] > 0
    assert ref["one"]["rtf"] == pytest.approx(ref["one"]["latency_s"] / (3 * FRAME_S))
    assert ref["concurrent"]["requests"] == 2 and ref["concurrent"]["call"]["frames_made"] == [3, 3]
    side = report["side_by_side"]
    assert side["rtf_one"] == {"anna": anna["rtf"], "reference": ref["one"]["rtf"]} and side["concurrency"] == 2
    assert side["latency_vs_one"]["reference"] == pytest.approx(ref["concurrent"]["latency_vs_one"])


def test_an_unknown_kernel_to_disable_is_one_clear_line(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--model-dir", str(CHECKPOINTS["custom_voice"]), "--device", "cpu", "--frames", "1",
              "--disable-kernel", "no_such_op:triton"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("tts_bench: cannot disable kernel 'no_such_op:triton': unknown op") and "Traceback" not in err


def test_a_negative_prefill_replay_limit_is_one_clear_line(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--model-dir", str(CHECKPOINTS["custom_voice"]), "--device", "cpu", "--max-prefill-replays", "-1"])
    assert stop.value.code == 2 and "--max-prefill-replays must be at least 0, got -1" in capsys.readouterr().err


def test_reference_that_does_not_import_stops_the_bench_at_once(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "qwen_tts", None)  # an import of it raises ImportError
    with pytest.raises(SystemExit) as exit_info:
        main(["--model-dir", str(CHECKPOINTS["custom_voice"]), "--device", "cpu", "--reference"])
    assert exit_info.value.code == 2
    assert "qwen_tts" in capsys.readouterr().err


def test_reference_whose_native_library_fails_stops_the_bench_at_once(monkeypatch, capsys, tmp_path):
    """A ``qwen_tts`` whose import raises OSError (a native library missing: libsox, torchaudio's) is reported as
    unavailable (exit 2, the message), not a traceback."""
    (tmp_path / "qwen_tts").mkdir()
    (tmp_path / "qwen_tts" / "__init__.py").write_text("raise OSError('libsox.so: cannot open shared object file')\n")
    monkeypatch.delitem(sys.modules, "qwen_tts", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(SystemExit) as exit_info:
        main(["--model-dir", str(CHECKPOINTS["custom_voice"]), "--device", "cpu", "--reference"])
    assert exit_info.value.code == 2
    assert "libsox.so" in capsys.readouterr().err


def test_bench_client_process_reports_failures():
    """The client process answers a round it cannot run with its error, raised in the benchmark; it serves the next
    round after one failed, and ends with the benchmark."""
    from anna_audio.tts_bench_client import BenchClient

    with BenchClient() as client:
        for _ in range(2):
            with pytest.raises(RuntimeError, match="the benchmark's client: ConnectError"):
                client.round("http://127.0.0.1:9/v1/audio/speech", 1, 0)
        proc = client._proc
    assert proc.poll() == 0
    with pytest.raises(RuntimeError, match="client process ended"):  # killed between rounds: a clean error, then exit
        with BenchClient() as client:
            client._proc.kill()
            client._proc.wait()
            client.round("http://127.0.0.1:9/v1/audio/speech", 1, 0)
