"""In-process benchmarks: prefill / decode speed through the real engine, the memory-bandwidth
roofline of a decode step, a per-component profile, the HF transformers side-by-side and
``bench-all`` (``python -m anna_core.bench.all``), which runs every issue-5 target in one process.
"""
