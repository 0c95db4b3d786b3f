"""A Llama-family decoder: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU MLP.

Parameter names follow Hugging Face's ``LlamaForCausalLM`` so checkpoints load by name.
The forward takes a flat batch of tokens from many requests and returns next-token logits.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from reference_impl.engine.torch_engine.attention_backend import (
    AttentionBackend,
    ForwardMetadata,
    TorchNativeBackend,
)
from reference_impl.engine.torch_engine.kv_cache import KVCache
from reference_impl.engine.torch_engine.model_config import ModelConfig


class RMSNorm(nn.Module):
    """Root-mean-square norm, computed in float32 as upstream."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


class Rotary(nn.Module):
    """cos/sin of rotary embeddings for any positions (computed per forward, no table cap)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.register_buffer("inv_freq", rope_inv_freq(config), persistent=False)

    def forward(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.float().unsqueeze(-1) * self.inv_freq  # (num_tokens, head_dim / 2)
        emb = torch.cat((freqs, freqs), dim=-1)  # (num_tokens, head_dim)
        return emb.cos().to(dtype).unsqueeze(1), emb.sin().to(dtype).unsqueeze(1)


def rope_inv_freq(config: ModelConfig) -> torch.Tensor:
    """(head_dim / 2,) float32 inverse frequencies, with Llama 3 scaling when configured."""
    dim = config.head_dim
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    if config.rope_type != "llama3":
        return inv_freq
    s = config.rope_scaling
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old_len = s["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(is_medium, smoothed, scaled)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (num_tokens, heads, head_dim); cos, sin: (num_tokens, 1, head_dim)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    """Grouped-query self-attention over the paged KV cache; q, k, v in one fused GEMM."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        hd, bias = config.head_dim, config.attention_bias
        self.num_heads, self.num_kv_heads, self.head_dim = (
            config.num_attention_heads, config.num_key_value_heads, hd)
        self.q_size, self.kv_size = self.num_heads * hd, self.num_kv_heads * hd
        # rows: q (heads * hd), k (kv_heads * hd), v (kv_heads * hd): HF's q/k/v_proj stacked
        self.qkv_proj = nn.Linear(config.hidden_size, self.q_size + 2 * self.kv_size, bias=bias)
        self.o_proj = nn.Linear(self.q_size, config.hidden_size, bias=bias)
        self.scale = hd ** -0.5

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor],
                k_cache: torch.Tensor, v_cache: torch.Tensor, meta: ForwardMetadata,
                backend: AttentionBackend) -> torch.Tensor:
        n = x.shape[0]
        q, k, v = self.qkv_proj(x).split((self.q_size, self.kv_size, self.kv_size), dim=-1)
        q = apply_rotary(q.view(n, self.num_heads, self.head_dim), *rope)
        k = apply_rotary(k.view(n, self.num_kv_heads, self.head_dim), *rope)
        v = v.view(n, self.num_kv_heads, self.head_dim)
        return self.o_proj(backend.forward(q, k, v, k_cache, v_cache, meta, self.scale))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x)), gate and up in one fused GEMM."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        h, i, bias = config.hidden_size, config.intermediate_size, config.mlp_bias
        self.intermediate_size = i
        self.gate_up_proj = nn.Linear(h, 2 * i, bias=bias)  # rows: HF's gate_proj, then up_proj
        self.down_proj = nn.Linear(i, h, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    """Pre-norm attention and MLP blocks with residuals."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.self_attn = Attention(config)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x, rope, k_cache, v_cache, meta, backend) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), rope, k_cache, v_cache, meta, backend)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaBody(nn.Module):
    """Embeddings, decoder layers, final norm (HF's ``model.*``)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = Rotary(config)


class LlamaForCausalLM(nn.Module):
    """The whole model: ``forward(input_ids, meta, kv_cache)`` → logits."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.attn_backend: AttentionBackend = TorchNativeBackend()  # chosen once by the engine
        self.model = LlamaBody(config)
        self.lm_head = None if config.tie_word_embeddings else nn.Linear(
            config.hidden_size, config.vocab_size, bias=False)

    @property
    def output_weight(self) -> torch.Tensor:
        return self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, meta: ForwardMetadata,
                kv_cache: KVCache) -> torch.Tensor:
        """input_ids: (num_tokens,); the result: (batch, vocab) float32 logits of each
        request's last token (of every token when ``meta.logits_index`` is None: decode)."""
        body = self.model
        x = body.embed_tokens(input_ids)  # (num_tokens, hidden)
        rope = body.rotary_emb(meta.positions, x.dtype)
        for i, layer in enumerate(body.layers):
            x = layer(x, rope, kv_cache.k[i], kv_cache.v[i], meta, self.attn_backend)
        if meta.logits_index is not None:
            x = x[meta.logits_index]  # (batch, hidden)
        return F.linear(body.norm(x), self.output_weight).float()


def hf_param_views(model: LlamaForCausalLM) -> dict[str, torch.Tensor]:
    """Every parameter under its Hugging Face name; fused ones as row-slice views (writable)."""
    views = {}
    for name, param in model.named_parameters():
        prefix, _, kind = name.rpartition(".")  # kind: weight or bias
        if prefix.endswith("qkv_proj"):
            attn = model.get_submodule(prefix.rpartition(".")[0])
            parts = zip(("q_proj", "k_proj", "v_proj"), (attn.q_size, attn.kv_size, attn.kv_size),
                        strict=True)
        elif prefix.endswith("gate_up_proj"):
            size = model.config.intermediate_size
            parts = zip(("gate_proj", "up_proj"), (size, size), strict=True)
        else:
            views[name] = param
            continue
        base, row = prefix.rpartition(".")[0], 0
        for part, size in parts:
            views[f"{base}.{part}.{kind}"] = param[row:row + size]
            row += size
    return views
