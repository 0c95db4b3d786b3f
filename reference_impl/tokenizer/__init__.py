"""Tokenizers for the serving stack: one interface, an embedded byte-level one and HF files.

``get_tokenizer(None)`` is the byte-level tokenizer (no download); ``get_tokenizer(path)``
loads a local ``tokenizer.json`` or a directory holding one. ``EMBEDDED_DIR`` is the byte-level
tokenizer as a Hugging Face directory, for clients that need one (written by ``export``).
"""

from __future__ import annotations

from pathlib import Path

from reference_impl.tokenizer.base import IncrementalDecoder, Tokenizer, render_plain_chat
from reference_impl.tokenizer.byte_level import ByteLevelTokenizer
from reference_impl.tokenizer.hf import HFTokenizer
from reference_impl.tokenizer.incremental import OffsetIncrementalDecoder, Utf8IncrementalDecoder

EMBEDDED_DIR = Path(__file__).resolve().parent / "embedded"

__all__ = [
    "EMBEDDED_DIR",
    "ByteLevelTokenizer",
    "HFTokenizer",
    "IncrementalDecoder",
    "OffsetIncrementalDecoder",
    "Tokenizer",
    "Utf8IncrementalDecoder",
    "get_tokenizer",
    "render_plain_chat",
]


def get_tokenizer(path: str | Path | None) -> Tokenizer:
    """The byte-level tokenizer for ``None``, else the HF tokenizer at ``path`` (file or directory)."""
    if path is None:
        return ByteLevelTokenizer()
    return HFTokenizer(path)
