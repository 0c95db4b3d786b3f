"""The Hugging Face tokenizer wrapper, over tokenizers trained here from a few sentences."""

from __future__ import annotations

import json
from array import array

import pytest

from reference_impl.tokenizer import HFTokenizer, get_tokenizer

from .hf_builders import CORPUS, train_tokenizer

TEXT = "The café in Zürich: 日本語 🙂🚀"


@pytest.fixture(scope="module")
def bpe_path(tmp_path_factory):
    return train_tokenizer("byte_bpe", tmp_path_factory.mktemp("byte_bpe"))


def test_loads_from_file_and_from_directory(bpe_path):
    from_file = get_tokenizer(str(bpe_path))
    from_dir = get_tokenizer(str(bpe_path.parent))
    assert isinstance(from_file, HFTokenizer)
    assert from_file.encode(TEXT) == from_dir.encode(TEXT)


def test_missing_path_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        get_tokenizer(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        get_tokenizer(str(tmp_path / "nope.json"))


def test_special_ids_found_by_name(bpe_path):
    tok = get_tokenizer(bpe_path)
    assert (tok.bos_token_id, tok.eos_token_id) == (0, 1)
    assert tok.vocab_size == 400


def test_config_file_names_the_eos_token(tmp_path):
    path = train_tokenizer("byte_bpe", tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": {"content": "<|unk|>"}}))
    assert get_tokenizer(path).eos_token_id == 2


def test_no_eos_token_is_an_error(tmp_path):
    path = train_tokenizer("byte_bpe", tmp_path)
    data = json.loads(path.read_text())
    data["added_tokens"] = []
    data["model"]["vocab"] = {k: v for k, v in data["model"]["vocab"].items() if not k.startswith("<|")}
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="no EOS token"):
        get_tokenizer(path)


@pytest.mark.parametrize("text", [TEXT, *CORPUS])
def test_byte_bpe_round_trip(bpe_path, text):
    tok = get_tokenizer(bpe_path)
    assert tok.decode(tok.encode(text)) == text


def test_encode_adds_no_special_tokens_and_decode_skips_them(bpe_path):
    tok = get_tokenizer(bpe_path)
    ids = tok.encode("hi")
    assert tok.bos_token_id not in ids and tok.eos_token_id not in ids
    assert tok.decode([tok.bos_token_id, *ids, tok.eos_token_id]) == "hi"
    assert tok.decode(array("q", ids)) == "hi"


def test_plain_chat_format_without_a_template(bpe_path):
    tok = get_tokenizer(bpe_path)
    prompt = tok.apply_chat_template([{"role": "user", "content": "日本"}])
    assert prompt == "<|user|>\n日本\n<|assistant|>\n"


def test_chat_template_from_config(tmp_path):
    pytest.importorskip("jinja2")
    path = train_tokenizer("byte_bpe", tmp_path)
    template = ("{{ bos_token }}{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{{ eos_token }}"
                "{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    tok = get_tokenizer(path)
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}])
    assert prompt == "<|bos|>[user]hi<|eos|>[assistant]"
    assert tok.encode(prompt)[0] == tok.bos_token_id


def test_broken_chat_template_falls_back_to_plain(tmp_path):
    pytest.importorskip("jinja2")
    path = train_tokenizer("byte_bpe", tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{% for %}"}))
    prompt = get_tokenizer(path).apply_chat_template([{"role": "user", "content": "hi"}])
    assert prompt == "<|user|>\nhi\n<|assistant|>\n"
