"""Tiny Hugging Face tokenizers trained in the test from a few sentences, saved as tokenizer.json."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

CORPUS = (
    "The quick brown fox jumps over the lazy dog.",
    "A café in Zürich serves naïve résumé jalapeño smörgåsbord.",
    "日本語のテキストと東京の数据流式。",
    "Привет мир, Ελλάδα ἀλήθεια → ∑ 🙂🚀🎉",
    "STOP, stop tokens and stop strings end a stream.",
)
SPECIAL_TOKENS = ["<|bos|>", "<|eos|>", "<|unk|>"]
KINDS = ("byte_bpe", "metaspace_bpe", "word_level")


def _byte_bpe() -> tuple[Tokenizer, trainers.Trainer]:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    return tok, trainer


def _metaspace_bpe() -> tuple[Tokenizer, trainers.Trainer]:
    tok = Tokenizer(models.BPE(unk_token="<|unk|>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    return tok, trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIAL_TOKENS)


def _word_level() -> tuple[Tokenizer, trainers.Trainer]:
    tok = Tokenizer(models.WordLevel(unk_token="<|unk|>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok, trainers.WordLevelTrainer(special_tokens=SPECIAL_TOKENS)


_BUILDERS = {"byte_bpe": _byte_bpe, "metaspace_bpe": _metaspace_bpe, "word_level": _word_level}


def train_tokenizer(kind: str, directory: Path) -> Path:
    """Train a tokenizer of ``kind`` on ``CORPUS`` and save ``directory/tokenizer.json``."""
    tok, trainer = _BUILDERS[kind]()
    tok.train_from_iterator(CORPUS, trainer=trainer)
    path = directory / "tokenizer.json"
    tok.save(str(path))
    return path
