"""``/tokenize`` and ``/detokenize`` (vLLM's shapes): the prompt ids the other endpoints would use."""

from __future__ import annotations

from reference_impl.config import ServerArgs
from reference_impl.server.protocol import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
)
from reference_impl.server.serving import BadRequest
from reference_impl.tokenizer import Tokenizer


class ServingTokenization:
    """Text or chat messages to ids, and ids to text, with the server's tokenizer."""

    def __init__(self, args: ServerArgs, tokenizer: Tokenizer):
        self.args = args
        self.tokenizer = tokenizer

    def tokenize(self, request: TokenizeRequest) -> TokenizeResponse:
        """The ids of ``prompt``, or of the chat prompt that ``messages`` renders to."""
        self._check_model(request.model)
        if request.messages is not None:
            messages = [{"role": m.role, "content": m.text} for m in request.messages]
            text = self.tokenizer.apply_chat_template(messages)
        else:
            text = request.prompt
        ids = self.tokenizer.encode(text)
        self._check_len(len(ids), "prompt" if request.messages is None else "messages")
        return TokenizeResponse(count=len(ids), max_model_len=self.args.context_length, tokens=ids)

    def detokenize(self, request: DetokenizeRequest) -> DetokenizeResponse:
        """The text of ``tokens``; each must be in the vocabulary."""
        self._check_model(request.model)
        vocab = self.tokenizer.vocab_size
        if any(t >= vocab for t in request.tokens):
            raise BadRequest(f"tokens must be token ids in [0, {vocab})", param="tokens")
        return DetokenizeResponse(prompt=self.tokenizer.decode(request.tokens))

    def _check_len(self, num_tokens: int, param: str) -> None:
        """The limits the generating endpoints apply to one prompt (past them, a 400)."""
        limit = min(self.args.context_length, self.args.max_request_prompt_tokens)
        if num_tokens > limit:
            raise BadRequest(f"The prompt has {num_tokens} tokens; the limit is {limit} (the context "
                             f"length, or --max-request-prompt-tokens).", param=param)

    def _check_model(self, model: str | None) -> None:
        if model is not None and model != self.args.served_model_name:
            raise BadRequest(f"The model '{model}' does not exist; this server serves "
                             f"'{self.args.served_model_name}'.", param="model",
                             code="model_not_found")
