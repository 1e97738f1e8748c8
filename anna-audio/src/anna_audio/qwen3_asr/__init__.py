"""Qwen3-ASR (``Qwen3ASRForConditionalGeneration``, ``model_type`` ``qwen3_asr``): speech to text on Anna's engine.

Modules: :mod:`.config` (both checkpoint layouts), :mod:`.weights` (tensor names), :mod:`.model` (encoder, projector,
the Qwen3 decoder with audio rows spliced in), :mod:`.processor` (waveforms -> features and placeholders),
:mod:`.prompt` (the prompt and output protocol, a public API), :mod:`.loader` (the family loader), :mod:`.tiny`
(tiny random checkpoints for tests).
"""
