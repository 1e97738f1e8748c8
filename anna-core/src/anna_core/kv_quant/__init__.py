"""TurboQuant KV-cache quantization (Zandieh et al., "TurboQuant: Online Vector Quantization with
Near-optimal Distortion Rate", arXiv 2504.19874).

* :mod:`.layout`: the byte layout of a quantized K or V row (pure Python: the cache specs and the
  scheduler's sizing read it without torch).
* :mod:`.codebook`: the Lloyd-Max codebook of one rotated coordinate (paper section 3.1).
* :mod:`.tables`: the per-group device tensors every quantize / attend call takes (rotation, QJL
  projection, codebooks).
* :mod:`.settings`: the ``--kv-cache-quantization`` / ``--kv-cache-quant-bits`` choice, ``auto``'s
  size tiers.

The math of writing and attending lives in the ops ``turboquant_cache_write`` and
``paged_attention_turboquant`` (:mod:`anna_core.kernels.reference.turboquant`).
"""

from anna_core.kv_quant.layout import TurboQuantLayout

__all__ = ["TurboQuantLayout"]
