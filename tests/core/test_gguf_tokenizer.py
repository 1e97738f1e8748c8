"""The tokenizer built from GGUF metadata: llama.cpp's split rules, the on-disk cache, chat template."""

import os

import pytest
from anna_core.weights import gguf_tokenizer
from anna_core.weights.gguf_tokenizer import load_gguf_tokenizer

from tests.core._gguf_fakes import write_gguf


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    return write_gguf(tmp_path_factory.mktemp("tok") / "tiny.gguf", tokenizer=True, llama=True)


@pytest.fixture(scope="module")
def tok(tiny_gguf, tmp_path_factory):
    return load_gguf_tokenizer(tiny_gguf, pre_type="smollm", cache=tmp_path_factory.mktemp("cache"))


def byte_id(ch: str) -> int:
    return 3 + ord(ch)


def test_encodings_follow_llama_cpp_smollm_split(tok):
    # smollm (llama.cpp): every digit is its own piece, so the "1 2" merge never applies;
    # " the" merges Ġ+t and h+e; control tokens stay whole.
    assert tok.encode("the 12") == [byte_id("t"), 260, byte_id(" "), byte_id("1"), byte_id("2")]
    assert tok.encode(" the") == [259, 260]
    assert tok.encode("<|im_start|>hi<|im_end|>") == [1, byte_id("h"), byte_id("i"), 2]
    assert tok.decode([259, 260, byte_id("!")]) == " the!"
    assert tok.eos_token_id == 2


def test_without_a_pre_type_fix_digits_merge(tiny_gguf, tmp_path):
    # The control: transformers' plain GPT-2 split keeps " 12" together, so the merge applies.
    plain = load_gguf_tokenizer(tiny_gguf, pre_type=None, cache=tmp_path)
    assert plain.encode("the 12") == [byte_id("t"), 260, byte_id(" "), 261]


def test_chat_template_and_list_of_text_parts(tok):
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}])
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    parts = [{"type": "text", "text": "h"}, {"type": "text", "text": "i"}]
    assert tok.apply_chat_template([{"role": "user", "content": parts}]) == text


def test_converted_tokenizer_is_cached_on_disk(tiny_gguf, tmp_path, monkeypatch):
    monkeypatch.setenv("ANNA_CACHE_DIR", str(tmp_path / "anna-cache"))
    first = load_gguf_tokenizer(tiny_gguf, pre_type="smollm")
    entries = list((tmp_path / "anna-cache" / "gguf-tokenizers").iterdir())
    assert len(entries) == 1 and (entries[0] / "tokenizer.json").is_file()

    def no_conversion(*args, **kwargs):
        raise AssertionError("converted again instead of reading the cache")

    monkeypatch.setattr(gguf_tokenizer, "convert_gguf_tokenizer", no_conversion)
    again = load_gguf_tokenizer(tiny_gguf, pre_type="smollm")
    assert again.encode("the 12 <|im_end|>") == first.encode("the 12 <|im_end|>")
    assert again.has_chat_template and again.eos_token_id == 2

    # a changed file (new mtime) is converted afresh
    st = tiny_gguf.stat()
    os.utime(tiny_gguf, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(AssertionError, match="converted again"):
        load_gguf_tokenizer(tiny_gguf, pre_type="smollm")


def test_unwritable_cache_still_loads(tiny_gguf, tmp_path):
    blocker = tmp_path / "file-not-dir"
    blocker.write_text("x")
    tok = load_gguf_tokenizer(tiny_gguf, pre_type="smollm", cache=blocker)
    assert tok.encode(" the") == [259, 260]


def test_a_family_converter_replaces_autotokenizer_and_has_its_own_cache_entry(tiny_gguf, tmp_path):
    calls = []

    def convert(path):
        calls.append(path)
        return gguf_tokenizer.convert_gguf_tokenizer(path, None)

    plain = load_gguf_tokenizer(tiny_gguf, cache=tmp_path)
    tok = load_gguf_tokenizer(tiny_gguf, cache=tmp_path, convert=convert)
    again = load_gguf_tokenizer(tiny_gguf, cache=tmp_path, convert=convert)
    assert calls == [tiny_gguf]  # converted once, then read from its cache entry
    assert len(list((tmp_path / "gguf-tokenizers").iterdir())) == 2
    assert tok.encode("the 12") == again.encode("the 12") == plain.encode("the 12")
