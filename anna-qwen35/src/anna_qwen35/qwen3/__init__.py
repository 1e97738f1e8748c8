"""The Qwen3 dense text family (transformers' ``Qwen3ForCausalLM``, ``model_type`` ``qwen3``): per-head q/k
RMSNorms, 1-D rotary, grouped-query attention, SwiGLU MLP. Also the text decoder of Qwen3-ASR.

Modules: :mod:`.config` (hyper-parameters), :mod:`.model` (the forward pass), :mod:`.weights` (checkpoint
names), :mod:`.loader` (the family loader), :mod:`.tiny` (tiny random checkpoints for tests).
"""
