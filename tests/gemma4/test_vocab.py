"""Gemma 4's real vocabulary (llama.cpp's ggml-vocab-gemma-4.gguf, from the pinned llama-cpp-python
sdist): Anna's tokenizer reproduces every llama.cpp test vector, keeps the chat-format tags whole and
of the right kind, caches the conversion, loads the same tokenizer back from a checkpoint folder, and
fails clearly when transformers' private conversion API changes."""

from __future__ import annotations

import importlib
import json

import pytest
from anna_core.errors import ModelLoadError

from tests.gemma4.vocab_files import fetch_module, gemma4_gguf, gemma4_tokenizer, gemma4_vocab_dir, vectors

pytest.importorskip("anna_gemma4")


@pytest.fixture(scope="module")
def tok():
    return gemma4_tokenizer()


def test_every_llama_cpp_vector(tok):
    cases = vectors()
    assert len(cases) == 46
    wrong = [(text, tok.encode(text), ids) for text, ids in cases if tok.encode(text) != ids]
    assert wrong == []
    # a few by hand, so the vectors themselves are seen to be read right
    assert dict(cases)["Hello world"] == [9259, 1902]
    assert dict(cases)[" Hello, world!"] == [26352, 236764, 1902, 236888]
    assert dict(cases)["\n"] == [107] and dict(cases)[""] == []


def test_decoding_inverts_encoding(tok):
    for text, ids in vectors():
        assert tok.decode(ids) == text


def test_markup_ids_and_kinds(tok):
    from anna_gemma4.tokenizer import check_markup, stop_token_ids

    assert check_markup(tok) == {
        "<|tool_call>": 48, "<tool_call|>": 49, "<|tool_response>": 50, "<tool_response|>": 51, '<|"|>': 52,
        "<|channel>": 100, "<channel|>": 101, "<|turn>": 105, "<turn|>": 106, "<|think|>": 98,
        "<|tool>": 46, "<tool|>": 47}
    assert (tok.hf.bos_token, tok.hf.eos_token, tok.eos_token_id, tok.vocab_size) == ("<bos>", "<eos>", 1, 262144)
    assert stop_token_ids(tok) == [1, 106]
    text = '<|turn>model\n<|channel>thought\nhm<channel|><|tool_call>call:f{a:<|"|>x<|"|>}<tool_call|><turn|>'
    ids = tok.encode(text)
    assert [ids.count(i) for i in (105, 100, 101, 48, 52, 49, 106)] == [1, 1, 1, 1, 2, 1, 1]
    # skip_special_tokens drops the turn tokens and keeps what the output parsers read
    assert tok.decode(ids) == 'model\n<|channel>thought\nhm<channel|><|tool_call>call:f{a:<|"|>x<|"|>}<tool_call|>'
    assert tok.decode(ids, skip_special_tokens=False) == text


def test_no_bos_added_by_encode(tok):
    # the chat template writes <bos> itself, as the reference tokenizer expects
    assert tok.encode("Hello", add_special_tokens=True) == [9259]
    assert tok.encode("<bos>Hello") == [2, 9259]


def test_conversion_is_cached(tmp_path, monkeypatch):
    from anna_core.weights import gguf_tokenizer
    from anna_gemma4 import tokenizer as g4tok

    calls = []
    real = g4tok.convert_gguf_vocabulary

    def counting(path):
        calls.append(path)
        return real(path)

    counting.__module__, counting.__qualname__ = real.__module__, real.__qualname__
    monkeypatch.setattr(g4tok, "convert_gguf_vocabulary", counting)
    first = g4tok.load_gguf_vocabulary(gemma4_gguf(), cache=tmp_path)
    (entry,) = (tmp_path / "gguf-tokenizers").iterdir()
    assert sorted(p.name for p in entry.iterdir()) == ["chat_template.jinja", "tokenizer.json", "tokenizer_config.json"]
    monkeypatch.setattr(gguf_tokenizer, "convert_gguf_tokenizer", lambda *a: pytest.fail("used AutoTokenizer"))
    again = g4tok.load_gguf_vocabulary(gemma4_gguf(), cache=tmp_path)
    assert len(calls) == 1
    sample = 'Hi <|tool_call>call:f{a:<|"|>{x}<|"|>}<tool_call|> 🦙'
    assert again.encode(sample) == first.encode(sample)
    assert again.hf.chat_template == first.hf.chat_template and "enable_thinking" in again.hf.chat_template


def test_checkpoint_folder_files_load_the_same_tokenizer(tok, tmp_path):
    """A safetensors checkpoint ships tokenizer.json, tokenizer_config.json and chat_template.jinja
    beside a config.json of model_type gemma4; Anna's folder path reads them without the model config."""
    from anna_gemma4.tokenizer import load_gemma4_tokenizer

    tok.hf.save_pretrained(str(tmp_path))
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config["tokenizer_class"] = "GemmaTokenizer"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
        "text_config": {"model_type": "gemma4_text", "num_key_value_heads": 8, "vocab_size": 262144}}))
    folder = load_gemma4_tokenizer(tmp_path)
    assert type(folder.hf).__name__ == "GemmaTokenizer"
    assert [folder.encode(text) for text, _ in vectors()] == [ids for _, ids in vectors()]
    msgs = [{"role": "user", "content": "Hi"}]
    assert folder.apply_chat_template(msgs, enable_thinking=True) == tok.apply_chat_template(msgs, enable_thinking=True)
    assert folder.eos_token_id == 1 and folder.encode("Hello", add_special_tokens=True) == [9259]


def test_a_folder_whose_tags_are_split_is_refused(tmp_path):
    from anna_core.testing.checkpoints import build_tiny_tokenizer
    from anna_gemma4.tokenizer import load_gemma4_tokenizer

    build_tiny_tokenizer(tmp_path)
    with pytest.raises(ModelLoadError, match=r"'<\|tool_call>' is not one token"):
        load_gemma4_tokenizer(tmp_path)


def test_private_api_changes_are_named(monkeypatch):
    import sys
    import types

    from anna_gemma4 import tokenizer as g4tok

    gguf = importlib.import_module("transformers.integrations.gguf")
    moved = types.ModuleType("transformers.integrations.gguf")
    moved.get_gguf_tokenizer = gguf.get_gguf_tokenizer
    monkeypatch.setitem(sys.modules, "transformers.integrations.gguf", moved)
    with pytest.raises(ModelLoadError, match=r"a function is missing .*written against transformers 5\.24"):
        g4tok.convert_gguf_vocabulary(gemma4_gguf())
    monkeypatch.undo()
    monkeypatch.setattr(gguf, "get_gguf_tokenizer", lambda path: ("gemma4", ["tokens"], {}))
    with pytest.raises(ModelLoadError, match="no longer returns"):
        g4tok.convert_gguf_vocabulary(gemma4_gguf())
    monkeypatch.setattr(gguf, "get_gguf_tokenizer", lambda path: ("llama", {"tokenizer_type": "gpt2"}, {}))
    with pytest.raises(ModelLoadError, match="'gpt2', not a Gemma 4 vocabulary"):
        g4tok.convert_gguf_vocabulary(gemma4_gguf())


def test_missing_file_is_a_load_error(tmp_path):
    from anna_gemma4.tokenizer import convert_gguf_vocabulary

    with pytest.raises(ModelLoadError, match="no GGUF file"):
        convert_gguf_vocabulary(tmp_path / "absent.gguf")


def test_pinned_private_api_shape():
    """What Anna relies on in transformers.integrations.gguf (pinned: .ci/constraints-cpu.txt)."""
    import inspect

    import transformers
    from transformers.integrations.gguf import convert_gguf_tokenizer, get_gguf_tokenizer

    assert transformers.__version__.startswith("5.24")
    assert list(inspect.signature(get_gguf_tokenizer).parameters) == ["gguf_path"]
    assert list(inspect.signature(convert_gguf_tokenizer).parameters) == ["architecture", "tokenizer_dict"]


def test_fetch_step_rechecks_hashes(tmp_path):
    """tools/fetch_test_vocab.py keeps a file only when its sha256 is the pinned one."""
    fetch = fetch_module()
    assert fetch.missing(gemma4_vocab_dir()) == []
    for name in fetch.FILES:
        (tmp_path / name).write_bytes((gemma4_vocab_dir() / name).read_bytes())
    assert fetch.missing(tmp_path) == []
    out = tmp_path / "ggml-vocab-gemma-4.gguf.out"
    out.write_text(out.read_text().replace("9259 1902", "9259 1903", 1))
    (tmp_path / "google-gemma-4-31B-it.jinja").unlink()
    assert fetch.missing(tmp_path) == ["ggml-vocab-gemma-4.gguf.out", "google-gemma-4-31B-it.jinja"]
    assert fetch.main(["--dest", str(gemma4_vocab_dir())]) == 0  # all in place: nothing downloaded
