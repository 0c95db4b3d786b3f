"""Where prompt token lengths come from: a local tokenizer file, the target's `/tokenize`, or an estimate.

Both tokenizers offer `encode(text) -> ids` and `decode(ids) -> text`, so the datasets fit prompts to
exact lengths the same way with either. `/tokenize` and `/detokenize` follow vLLM's shapes (SGLang
serves the same): `{"prompt": text}` -> `{"count", "max_model_len", "tokens"}` and
`{"tokens": [...]}` -> `{"prompt": text}`.
"""

from __future__ import annotations

import httpx

SOURCE_FILE = "tokenizer file"
SOURCE_SERVER = "server /tokenize"
SOURCE_ESTIMATE = "estimate (no tokenizer: the server's usage gives the real count)"
SOURCE_IDS = "token ids"


class FileTokenizer:
    """A local `tokenizer.json` (the `tokenizers` library)."""

    source = SOURCE_FILE

    def __init__(self, path: str) -> None:
        from tokenizers import Tokenizer

        self.path = path
        self.tokenizer = Tokenizer.from_file(path)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, without special tokens."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        """Text of `ids`."""
        return self.tokenizer.decode(ids)


class ServerTokenizer:
    """The target server's `/tokenize` and `/detokenize` (one keep-alive connection)."""

    source = SOURCE_SERVER

    def __init__(self, base_url: str, headers: dict, timeout_s: float) -> None:
        self.client = httpx.Client(base_url=base_url, headers=headers, timeout=timeout_s)
        self.extra: dict = {"add_special_tokens": False}

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` as the server counts them (without special tokens where it can)."""
        r = self.client.post("/tokenize", json={"prompt": text, **self.extra})
        r.raise_for_status()
        return r.json()["tokens"]

    def decode(self, ids: list[int]) -> str:
        """Text of `ids` as the server decodes them."""
        r = self.client.post("/detokenize", json={"tokens": ids})
        r.raise_for_status()
        return r.json()["prompt"]

    def close(self) -> None:
        """Close the connection."""
        self.client.close()


def probe_server(base_url: str, headers: dict, timeout_s: float) -> tuple[ServerTokenizer | None, str]:
    """A working ServerTokenizer, or None and why not (one round trip of each endpoint)."""
    tok = ServerTokenizer(base_url, headers, timeout_s)
    try:
        try:
            ids = tok.encode("hello world")
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code not in (400, 422):
                raise
            tok.extra = {}  # a server that rejects vLLM's add_special_tokens field
            ids = tok.encode("hello world")
        if not isinstance(ids, list) or not isinstance(tok.decode(ids), str):
            raise ValueError("unexpected response shape")
    except httpx.HTTPStatusError as exc:
        tok.close()
        return None, f"HTTP {exc.response.status_code} from {exc.request.url.path}"
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        tok.close()
        return None, f"{type(exc).__name__}: {exc}"
    return tok, ""


def fit_to_len(ids: list[int], num_tokens: int, tokenizer, extra_text) -> tuple[str, int]:
    """Text that re-tokenises to `num_tokens` tokens, starting from `ids` (at least that many).

    Cutting ids and decoding can re-tokenise to a different count at the cut; a few rounds of
    trimming (or topping up with `extra_text()`) settle it. Returns the text and its real count.
    """
    ids = ids[:num_tokens]
    for _ in range(4):
        text = tokenizer.decode(ids)
        again = tokenizer.encode(text)
        if len(again) == num_tokens:
            return text, num_tokens
        if len(again) > num_tokens:
            ids = again[:num_tokens]
        else:
            ids = again + tokenizer.encode(extra_text())[: num_tokens - len(again)]
    text = tokenizer.decode(ids)
    return text, len(tokenizer.encode(text))
