"""The embedded byte-level tokenizer as a Hugging Face tokenizer directory, for offline clients.

Third-party load generators (aiperf, guidellm, ``vllm bench serve``) count tokens with a Hugging
Face tokenizer named after the served model and fail offline; pointed at this directory they
count exactly as the server does. ``python -m reference_impl.tokenizer.export`` prints the path of
``EMBEDDED_DIR`` (the copy shipped in the package, to hand a client); ``... export DIR`` writes the
files into DIR.

The JSON is written from plain dicts here, not by ``tokenizers``' own serializer, so the files
do not change with the installed library version.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from reference_impl.config import SIM_CONTEXT_LENGTH
from reference_impl.tokenizer import EMBEDDED_DIR
from reference_impl.tokenizer.byte_level import NUM_BYTE_TOKENS, SPECIAL_TOKENS

MODEL_MAX_LENGTH = SIM_CONTEXT_LENGTH  # the served model's context; only a hint to clients

# ``<|role|>\n`` + content + ``\n`` per message, then ``<|assistant|>\n``: render_plain_chat, with
# a list content's text parts joined by newlines as the server's protocol does before rendering.
CHAT_TEMPLATE = "".join((
    "{%- for message in messages -%}",
    "{{- '<|' ~ message['role'] ~ '|>\\n' -}}",
    "{%- if message['content'] is string -%}{{- message['content'] -}}",
    "{%- elif message['content'] -%}",
    "{{- message['content'] | selectattr('type', 'equalto', 'text')"
    " | map(attribute='text') | join('\\n') -}}",
    "{%- endif -%}",
    "{{- '\\n' -}}",
    "{%- endfor -%}",
    "{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}",
))


def byte_to_unicode() -> list[str]:
    """GPT-2's printable stand-in character for each byte (index = byte), as ByteLevel expects."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    chars = [""] * NUM_BYTE_TOKENS
    num_shifted = 0
    for byte in range(NUM_BYTE_TOKENS):
        if byte in printable:
            chars[byte] = chr(byte)
        else:
            chars[byte] = chr(NUM_BYTE_TOKENS + num_shifted)
            num_shifted += 1
    return chars


def tokenizer_json() -> dict:
    """``tokenizer.json``: a merge-free byte-level BPE (id = byte) plus the special tokens."""
    vocab = {char: byte for byte, char in enumerate(byte_to_unicode())}
    added = [{"id": NUM_BYTE_TOKENS + i, "content": token, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}
             for i, token in enumerate(SPECIAL_TOKENS)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
                  "use_regex": False}
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
             "vocab": vocab, "merges": []}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": None, "pre_tokenizer": byte_level, "post_processor": None,
            "decoder": byte_level, "model": model}


def tokenizer_config_json() -> dict:
    """``tokenizer_config.json`` for ``transformers.AutoTokenizer``: special tokens, chat template.

    ``split_special_tokens`` makes a literal ``<|eos|>`` in text encode as its bytes, as the
    server does; the plain ``tokenizers`` library ignores it and matches the special token.
    """
    return {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|bos|>",
            "eos_token": "<|eos|>", "pad_token": "<|pad|>", "unk_token": "<|unk|>",
            "add_bos_token": False, "add_eos_token": False, "clean_up_tokenization_spaces": False,
            "split_special_tokens": True, "model_max_length": MODEL_MAX_LENGTH,
            "chat_template": CHAT_TEMPLATE}


def config_json() -> dict:
    """A minimal Llama ``config.json`` (the torch engine's family) holding only the token facts.

    ``vllm bench serve`` reads a model config from the tokenizer directory and, without one,
    logs errors and waits 2 s before going on; no client needs the model's shapes.
    """
    return {"model_type": "llama", "vocab_size": NUM_BYTE_TOKENS + len(SPECIAL_TOKENS),
            "bos_token_id": NUM_BYTE_TOKENS + SPECIAL_TOKENS.index("<|bos|>"),
            "eos_token_id": NUM_BYTE_TOKENS + SPECIAL_TOKENS.index("<|eos|>"),
            "pad_token_id": NUM_BYTE_TOKENS + SPECIAL_TOKENS.index("<|pad|>"),
            "max_position_embeddings": MODEL_MAX_LENGTH}


def exported_files() -> dict[str, str]:
    """File name to text, for every file of the tokenizer directory."""
    files = {"tokenizer.json": tokenizer_json(), "tokenizer_config.json": tokenizer_config_json(),
             "config.json": config_json()}
    return {name: json.dumps(data, indent=2, ensure_ascii=False) + "\n"
            for name, data in files.items()}


def export(directory: str | Path = EMBEDDED_DIR) -> Path:
    """Write the tokenizer directory (created if missing); its path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in exported_files().items():
        (directory / name).write_text(text, encoding="utf-8")
    return directory


def main(argv: list[str] | None = None) -> int:
    """``python -m reference_impl.tokenizer.export [DIR]``: the shipped directory's path, or
    write the files into DIR and print it."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print("usage: python -m reference_impl.tokenizer.export [DIR]", file=sys.stderr)
        return 2
    print(export(argv[0]) if argv else EMBEDDED_DIR)
    return 0


if __name__ == "__main__":
    sys.exit(main())
