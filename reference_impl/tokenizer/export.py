"""The embedded byte-level tokenizer as a Hugging Face tokenizer directory, for other clients.

Third-party benchmark clients (aiperf, guidellm, ``vllm bench serve``) count tokens with a
Hugging Face tokenizer named after the served model and try to download it. This writes one
that gives exactly the server's ids: every UTF-8 byte is its own token (id = byte value, GPT-2's
byte-to-character alphabet as the vocabulary, no merges), the four special tokens follow, and
the chat template is the server's plain chat format. The committed copy is ``EMBEDDED_DIR``:
``python -m reference_impl.tokenizer.export`` prints its path (to give a client), and
``python -m reference_impl.tokenizer.export DIR`` writes the files into DIR.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from reference_impl.tokenizer.byte_level import NUM_BYTE_TOKENS, SPECIAL_TOKENS

EMBEDDED_DIR = Path(__file__).resolve().parent / "embedded"
# NOTE: the server always ends with the assistant turn (render_plain_chat); a client asking for
# no generation prompt gets the turns alone.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "<|{{ message['role'] }}|>{{ '\\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- elif message['content'] -%}"
    "{{ message['content'] | selectattr('type', 'equalto', 'text') | map(attribute='text') | join('\\n') }}"
    "{%- endif -%}"
    "{{ '\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>{{ '\\n' }}{%- endif -%}"
)


def build() -> Tokenizer:
    """The byte-level tokenizer as a ``tokenizers.Tokenizer``."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    byte_char = _bytes_to_unicode()
    assert set(byte_char.values()) == set(alphabet)
    vocab = {byte_char[b]: b for b in range(NUM_BYTE_TOKENS)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    return tok


def config() -> dict:
    """``tokenizer_config.json``: the fast tokenizer class, special tokens and chat template.

    ``split_special_tokens``: text that spells a special token is encoded as bytes, as the server does.
    """
    return {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|bos|>",
            "eos_token": "<|eos|>", "pad_token": "<|pad|>", "unk_token": "<|unk|>",
            "add_bos_token": False, "add_eos_token": False, "clean_up_tokenization_spaces": False,
            "model_max_length": 131072, "split_special_tokens": True, "chat_template": CHAT_TEMPLATE}


def write(directory: Path) -> Path:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tokenizer.json").write_text(build().to_str(pretty=True) + "\n")
    (directory / "tokenizer_config.json").write_text(json.dumps(config(), indent=2) + "\n")
    return directory


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte → printable character map, as the ByteLevel pre-tokenizer uses."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


if __name__ == "__main__":
    print(write(Path(sys.argv[1])) if len(sys.argv) > 1 else EMBEDDED_DIR)
