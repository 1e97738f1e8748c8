"""Qwen3-TTS (12 Hz: Base, CustomVoice, VoiceDesign) for Anna: configuration, the codec decoder (codes -> 24 kHz
waveform, batched and streamed) and the code predictor, in plain PyTorch. The talker on Anna's engine comes next
(issue 27)."""

from anna_audio.qwen3_tts.code_predictor import CodePredictor, greedy
from anna_audio.qwen3_tts.codec_decoder import CodecDecoder, StreamingDecoder
from anna_audio.qwen3_tts.config import Qwen3TTSConfig, load_config, parse_config
from anna_audio.qwen3_tts.weights import load_code_predictor, load_codec_decoder

__all__ = ["CodePredictor", "CodecDecoder", "Qwen3TTSConfig", "StreamingDecoder", "greedy", "load_code_predictor",
           "load_codec_decoder", "load_config", "parse_config"]
