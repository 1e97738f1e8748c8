"""One line of an `anna bench --json` report (the figures GPU call scripts print): tokens per second per stream and
in total, roofline fraction, copy bandwidth, graphs, the served-against-eager token check, setup time.

    python3 tools/gpu_experiments/bench_summary.py REPORT.json
"""

import json
import sys

KEEP = ("decode_tokens_per_s_per_stream", "decode_tokens_per_s_total", "roofline_fraction", "copy_bandwidth_gbps",
        "ttft_ms", "graphs_captured", "eager_steps", "served_vs_eager_match_tokens", "setup_s", "weight_quant",
        "lm_head_path")

text = open(sys.argv[1]).read()
if "{" not in text:
    print("no report")
    sys.exit(0)
report = json.loads(text[text.index("{"):])
print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in report.items() if k in KEEP})
