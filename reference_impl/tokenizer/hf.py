"""A Hugging Face ``tokenizer.json`` (``tokenizers`` library) behind the ``Tokenizer`` interface.

EOS and BOS come from a ``tokenizer_config.json`` beside the file when there is one, else from
well-known special token names. Its Jinja chat template is used when one is there and jinja2
is installed; otherwise the plain chat format.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import tokenizers

from reference_impl.tokenizer.base import IncrementalDecoder, Tokenizer, render_plain_chat
from reference_impl.tokenizer.incremental import OffsetIncrementalDecoder

logger = logging.getLogger(__name__)

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"
EOS_NAMES = ("<|eos|>", "</s>", "<|endoftext|>", "<|end_of_text|>", "<eos>", "<|im_end|>", "<|eot_id|>")
BOS_NAMES = ("<|bos|>", "<s>", "<|begin_of_text|>", "<bos>")

ChatRenderer = Callable[[list[dict]], str]


def resolve_tokenizer_file(path: str | Path) -> Path:
    """``path`` itself if it is a file, else ``path/tokenizer.json``; FileNotFoundError if neither."""
    path = Path(path)
    file = path / TOKENIZER_FILE if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"no tokenizer file at {file}")
    return file


class HFTokenizer(Tokenizer):
    """A ``tokenizers.Tokenizer`` loaded from a local file."""

    def __init__(self, path: str | Path):
        file = resolve_tokenizer_file(path)
        self._tok = tokenizers.Tokenizer.from_file(str(file))
        config = _read_config(file.parent / CONFIG_FILE)
        # NOTE: as transformers does: special tokens spelled in the text are encoded as text.
        self._tok.encode_special_tokens = bool(config.get("split_special_tokens"))
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        eos_token_id = self._find_token_id(config.get("eos_token"), EOS_NAMES)
        if eos_token_id is None:
            raise ValueError(f"{file}: no EOS token (none of {EOS_NAMES}, nor in {CONFIG_FILE})")
        self.eos_token_id = eos_token_id
        self.bos_token_id = self._find_token_id(config.get("bos_token"), BOS_NAMES)
        self._render_chat = _chat_renderer(config, self._token_text(self.bos_token_id),
                                           self._token_text(self.eos_token_id))

    def encode(self, text: str) -> list[int]:
        """The ids of ``text``; added tokens written in the text are recognised (unless the config
        says ``split_special_tokens``), none are added."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` with special tokens skipped."""
        if not isinstance(ids, list):
            ids = list(ids)
        return self._tok.decode(ids, skip_special_tokens=True)

    def apply_chat_template(self, messages: list[dict]) -> str:
        """The tokenizer's own chat template if it has one, else the plain chat format."""
        return self._render_chat(messages)

    def incremental_decoder(self) -> IncrementalDecoder:
        """A prefix/read offsets decoder over this tokenizer's ``decode``."""
        return OffsetIncrementalDecoder(self.decode)

    def _find_token_id(self, configured: object, names: Sequence[str]) -> int | None:
        if isinstance(configured, dict):
            configured = configured.get("content")
        candidates = ([configured] if isinstance(configured, str) else []) + list(names)
        for name in candidates:
            token_id = self._tok.token_to_id(name)
            if token_id is not None:
                return token_id
        return None

    def _token_text(self, token_id: int | None) -> str:
        return "" if token_id is None else self._tok.id_to_token(token_id)


def _read_config(path: Path) -> dict:
    if not path.is_file():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


def _chat_renderer(config: dict, bos_token: str, eos_token: str) -> ChatRenderer:
    source = config.get("chat_template")
    template = _compile_jinja(source) if isinstance(source, str) else None
    if template is None:
        return render_plain_chat

    def render(messages: list[dict]) -> str:
        return template.render(messages=messages, add_generation_prompt=True,
                               bos_token=bos_token, eos_token=eos_token)

    return render


def _compile_jinja(source: str):
    try:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        return None

    def raise_exception(message: str):
        raise ValueError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.filters["tojson"] = lambda value, indent=None: json.dumps(value, ensure_ascii=False, indent=indent)
    try:
        return env.from_string(source)
    except TemplateError as exc:
        logger.warning("chat template unusable (%s); using the plain chat format", exc)
        return None
