"""Where prompt token lengths come from: a local tokenizer file, the target's `/tokenize`, or an estimate.

Both tokenizers offer `encode(text) -> ids` and `decode(ids) -> text`, so the datasets fit prompts to
exact lengths the same way with either. `/tokenize` and `/detokenize` follow vLLM's shapes (SGLang
serves the same): `{"prompt": text}` -> `{"count", "max_model_len", "tokens"}` and
`{"tokens": [...]}` -> `{"prompt": text}`.
"""

from __future__ import annotations

import json
import os

import httpx

SOURCE_FILE = "tokenizer file"
SOURCE_SERVER = "server /tokenize"
SOURCE_ESTIMATE = "estimate (no tokenizer: the server's usage gives the real count)"
SOURCE_IDS = "token ids"
VOCAB_FLAG = "--vocab-size"
VOCAB_FILE = "tokenizer file (its base vocabulary, as SGLang's random-ids)"
VOCAB_SERVER = "server /detokenize (the ids it accepts)"
#: The largest vocabulary the server probe looks for (the largest models' are about 2**18).
MAX_PROBED_VOCAB = 1 << 24


def tokenizer_file(path: str) -> str:
    """The tokenizer.json that `--tokenizer` names: the file itself, or the one in a model directory."""
    if not os.path.isdir(path):
        return path
    found = os.path.join(path, "tokenizer.json")
    if not os.path.isfile(found):
        present = ", ".join(sorted(os.listdir(path))[:8]) or "nothing"
        raise FileNotFoundError(f"{path} has no tokenizer.json (loadgen reads the fast-tokenizer file; "
                                f"found: {present})")
    return found


def _chat_config(path: str) -> dict:
    """tokenizer_config.json beside the tokenizer file, or {} when there is none."""
    cfg_path = os.path.join(os.path.dirname(tokenizer_file(path)), "tokenizer_config.json")
    if not os.path.isfile(cfg_path):
        return {}
    with open(cfg_path, encoding="utf-8") as f:
        return json.load(f)


def _token_text(value) -> str:
    return value.get("content", "") if isinstance(value, dict) else (value or "")


class FileTokenizer:
    """A local `tokenizer.json`, or a model directory holding one (the `tokenizers` library).

    Where the directory's tokenizer_config.json has a `chat_template`, `chat_len(text)` counts the
    tokens of a user message rendered through it, as a chat server counts its prompt."""

    source = SOURCE_FILE

    def __init__(self, path: str) -> None:
        from tokenizers import Tokenizer

        self.path = tokenizer_file(path)
        self.tokenizer = Tokenizer.from_file(self.path)
        self.config = _chat_config(path)
        self.num_special_tokens = len(self.tokenizer.encode("", add_special_tokens=True).ids)
        template = self.config.get("chat_template")
        self.chat_template = None
        if isinstance(template, str):
            import jinja2

            env = jinja2.Environment(undefined=jinja2.ChainableUndefined, trim_blocks=True, lstrip_blocks=True)
            self.chat_template = env.from_string(template)

    def chat_len(self, text: str) -> int | None:
        """Tokens of `text` as one user message through the chat template; None without a template."""
        if self.chat_template is None:
            return None
        rendered = self.chat_template.render(
            messages=[{"role": "user", "content": text}], add_generation_prompt=True,
            bos_token=_token_text(self.config.get("bos_token")), eos_token=_token_text(self.config.get("eos_token")))
        return len(self.tokenizer.encode(rendered, add_special_tokens=False).ids)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, without special tokens."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        """Text of `ids` (without special tokens unless `skip_special_tokens` is False)."""
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)


class ServerTokenizer:
    """The target server's `/tokenize` and `/detokenize` (one keep-alive connection)."""

    source = SOURCE_SERVER

    def __init__(self, base_url: str, headers: dict, timeout_s: float, verify=True) -> None:
        self.client = httpx.Client(base_url=base_url, headers=headers, timeout=timeout_s, verify=verify)
        self.extra: dict = {"add_special_tokens": False}
        self.max_model_len: int | None = None  # the model's context, as the probe's answer gave it

    def tokenize(self, text: str) -> dict:
        """The server's whole /tokenize answer for `text`."""
        r = self.client.post("/tokenize", json={"prompt": text, **self.extra})
        r.raise_for_status()
        return r.json()

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` as the server counts them (without special tokens where it can)."""
        return self.tokenize(text)["tokens"]

    def decode(self, ids: list[int]) -> str:
        """Text of `ids` as the server decodes them."""
        r = self.client.post("/detokenize", json={"tokens": ids})
        r.raise_for_status()
        return r.json()["prompt"]

    def close(self) -> None:
        """Close the connection."""
        self.client.close()


def probe_server(base_url: str, headers: dict, timeout_s: float, verify=True) -> tuple[ServerTokenizer | None, str]:
    """A working ServerTokenizer, or None and why not (one round trip of each endpoint)."""
    tok = ServerTokenizer(base_url, headers, timeout_s, verify)
    try:
        try:
            answer = tok.tokenize("hello world")
        except httpx.HTTPStatusError as exc:
            if exc.response.status_code not in (400, 422):
                raise
            tok.extra = {}  # a server that rejects vLLM's add_special_tokens field
            answer = tok.tokenize("hello world")
        ids = answer["tokens"]
        if not isinstance(ids, list) or not isinstance(tok.decode(ids), str):
            raise ValueError("unexpected response shape")
        context = answer.get("max_model_len")
        if isinstance(context, int) and not isinstance(context, bool) and context > 0:
            tok.max_model_len = context
    except httpx.HTTPStatusError as exc:
        tok.close()
        return None, f"HTTP {exc.response.status_code} from {exc.request.url.path}"
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        tok.close()
        return None, f"{type(exc).__name__}: {exc}"
    return tok, ""


def file_vocab_size(path: str) -> int:
    """The base vocabulary of a tokenizer file (without added special tokens)."""
    return FileTokenizer(path).tokenizer.get_vocab_size(with_added_tokens=False)


def probe_vocab_size(base_url: str, headers: dict, timeout_s: float, verify=True) -> tuple[int | None, str]:
    """The target's vocabulary size V, found as the ids its `/detokenize` accepts: 0 .. V-1 answer 200
    with a text, V answers 400 or 422 (the reference server and SGLang check the range). Doubling,
    then bisection: about 2·log2(V) requests. None and why when it cannot tell: no such endpoint,
    id 0 refused, or every id up to MAX_PROBED_VOCAB accepted (a server that decodes any id)."""
    with httpx.Client(base_url=base_url, headers=headers, timeout=timeout_s, verify=verify) as client:

        def accepts(token_id: int) -> bool:
            r = client.post("/detokenize", json={"tokens": [token_id]})
            if r.status_code in (400, 422):
                return False
            r.raise_for_status()
            if not isinstance(r.json().get("prompt"), str):
                raise ValueError("unexpected response shape")
            return True

        try:
            if not accepts(0):
                return None, "/detokenize refused token id 0"
            low, high = 0, 1
            while accepts(high):
                low, high = high, 2 * high
                if high > MAX_PROBED_VOCAB:
                    return None, f"/detokenize accepted every id up to {low:,}: it does not check the range"
            while high - low > 1:
                mid = (low + high) // 2
                low, high = (mid, high) if accepts(mid) else (low, mid)
        except httpx.HTTPStatusError as exc:
            return None, f"HTTP {exc.response.status_code} from /detokenize"
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            return None, f"{type(exc).__name__}: {exc}"
    return high, ""


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
