"""``python -m anna_core.bench.llm_path`` (the Python API against ``anna bench``) runs end to end on the CPU."""

import json

from anna_core.bench import llm_path

from tests.bench.tiny_config import write_tiny_qwen35_config


def test_llm_path_reports_both_paths_and_their_ratios(tmp_path, capsys):
    folder = write_tiny_qwen35_config(tmp_path / "cfg")
    out = tmp_path / "llm_path.json"
    assert llm_path.main(["--model-dir", str(folder), "--device", "cpu", "--dtype", "fp32", "--input-len", "16",
                          "--output-len", "4", "--ttft-len", "24", "--runs", "1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["bench"]["decode_tokens_per_s"] > 0 and result["llm"]["decode_tokens_per_s"] > 0
    assert result["decode_ratio"] == result["llm"]["decode_tokens_per_s"] / result["bench"]["decode_tokens_per_s"]
    assert result["llm"]["graphs_captured"] == 0.0  # the CPU has no graphs
    assert "LLM / bench: decode" in capsys.readouterr().out
