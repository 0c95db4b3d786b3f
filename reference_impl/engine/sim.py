"""The simulated engine: seeded token streams and step times from a latency model.

It builds each batch's input tensor through the scheduler's token storage (H4), as a real
engine would, then waits out the modelled step time on its clock (sleeping, never spinning),
so what a profiler sees is the CPU cost of the serving path.
"""

from __future__ import annotations

import random
import zlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from reference_impl.engine.base import Clock, Engine, ForwardBatch
from reference_impl.scheduler.token_storage import TokenStorage
from reference_impl.tokenizer import Tokenizer


@dataclass(frozen=True)
class LatencyProfile:
    """prefill = fixed + per-token; decode = fixed + per-sequence + per-KV-token (seconds).

    ``eager_step_fixed_s`` matters only to DP-attention groups: a lockstep step in which any
    rank extends runs eagerly (no CUDA graph) on every rank, each paying this fixed cost.
    """

    prefill_fixed_s: float
    prefill_per_token_s: float
    decode_fixed_s: float
    decode_per_seq_s: float
    decode_per_kv_token_s: float
    eager_step_fixed_s: float = 0.0

    def prefill_time(self, num_tokens: int) -> float:
        return self.prefill_fixed_s + self.prefill_per_token_s * num_tokens

    def decode_time(self, num_seqs: int, num_kv_tokens: int) -> float:
        return (self.decode_fixed_s + self.decode_per_seq_s * num_seqs
                + self.decode_per_kv_token_s * num_kv_tokens)

    def batch_time(self, batch: ForwardBatch | None, is_eager: bool = False) -> float:
        """One rank's share of a step; an idle rank in an eager step still joins the collective."""
        eager = self.eager_step_fixed_s if is_eager else 0.0
        if batch is None:
            return eager
        if batch.is_prefill:
            return eager + self.prefill_time(sum(len(r.fill_ids) for r in batch.reqs))
        return eager + self.decode_time(len(batch.reqs), sum(r.seq_len for r in batch.reqs))

    def lockstep_time(self, batches: Sequence[ForwardBatch | None]) -> float:
        """A DP-attention step: as long as its slowest rank, eager on all if any rank extends."""
        is_eager = any(b is not None and b.is_prefill for b in batches)
        return max(self.batch_time(b, is_eager) for b in batches)


PROFILES: dict[str, LatencyProfile] = {
    # One H100 serving an 8B model in bf16: decode reads 16 GB of weights (~5 ms at 3.35 TB/s)
    # plus 128 KiB of KV per cached token; prefill runs near 25k tokens/s.
    "h100-llama-8b": LatencyProfile(4e-3, 40e-6, 6e-3, 8e-6, 4e-8),
    # A PD decode node: one H100 SXM, Llama-3.1-8B bf16 weights, fp8 KV (64 KiB per token).
    # decode: ~6 ms fixed (16 GB of weights at 3.35 TB/s plus launch and sampling), 25 us per
    # sequence (16 GFLOP per token at 65% of 989 TFLOPS), 24 ns per KV token (64 KiB at 80% of
    # 3.35 TB/s). 2048 sequences x 256 KV tokens: 6 + 51 + 13 = 70 ms a step, ~29K output tok/s.
    # Prefill as h100-llama-8b (a decode node runs none; see scheduler/disaggregation.py).
    "pd-decode-h100": LatencyProfile(4e-3, 40e-6, 6e-3, 25e-6, 2.4e-8),
    # A PD decode node fast enough that the HTTP process limits throughput in every form, which
    # is upstream's H1+H2 setting by definition (its decode-side tokenizer manager was the CPU
    # bottleneck). 16 ms + 4 us per sequence: 24 ms a step at 2048 sequences, ~85K output tok/s.
    # A guess in magnitude (e.g. 2048 sequences spread over the GPUs of a multi-GPU decode node);
    # on pd-decode-h100 the optimized HTTP process is no longer the limit (see the README).
    "pd-decode-fast": LatencyProfile(4e-3, 40e-6, 16e-3, 4e-6, 0.0),
    # No modelled time at all: the scheduler runs as fast as its CPU allows.
    "zero": LatencyProfile(0.0, 0.0, 0.0, 0.0, 0.0),
    # A large MoE (upstream's H5 figures: Qwen3.5-397B-A17B-FP8 on one 4-GPU GB200 tray) with
    # DP attention, per rank: a short graph decode step and a large eager fixed cost for any
    # step holding an extend. See README "DP attention regime" for where each number comes from.
    "gb200-moe-dp": LatencyProfile(prefill_fixed_s=2e-3, prefill_per_token_s=53e-6,
                                   decode_fixed_s=12.5e-3, decode_per_seq_s=50e-6,
                                   decode_per_kv_token_s=0.0, eager_step_fixed_s=250e-3),
}

_WORDS = (
    "the", "a", "token", "stream", "server", "batch", "model", "cache", "prefill", "decode",
    "latency", "queue", "café", "naïve", "résumé", "jalapeño", "Zürich", "smörgåsbord",
    "日本語", "東京", "数据", "流式", "Привет", "мир", "Ελλάδα", "ἀλήθεια", "🙂", "🚀", "∑", "→",
)
_NATURAL_LEN = (16, 512)


class SimStream:
    """One request's deterministic token stream (words from a fixed table, then EOS)."""

    def __init__(self, seed: int, word_ids: list[list[int]], eos_token_id: int):
        self._rng = random.Random(seed)
        self._word_ids = word_ids
        self._eos = eos_token_id
        self._pending: list[int] = []
        self._remaining = self._rng.randint(*_NATURAL_LEN)

    def next_token(self, ignore_eos: bool) -> int:
        if not ignore_eos and self._remaining <= 0:
            return self._eos
        self._remaining -= 1
        if not self._pending:
            self._pending = list(reversed(self._rng.choice(self._word_ids)))
        return self._pending.pop()


class SimEngine(Engine):
    """A model engine whose tokens are seeded and whose step times come from a profile."""

    def __init__(self, tokenizer: Tokenizer, storage: TokenStorage, clock: Clock,
                 profile: str = "h100-llama-8b", seed: int = 0,
                 max_total_num_tokens: int | None = None):
        if profile not in PROFILES:
            raise ValueError(f"unknown sim profile {profile!r}; choose from {sorted(PROFILES)}")
        self.profile = PROFILES[profile]
        self.max_total_num_tokens = max_total_num_tokens or (1 << 22)
        self._storage = storage
        self._clock = clock
        self._seed = seed
        self._eos = tokenizer.eos_token_id
        self._word_ids = [tokenizer.encode(" " + w) for w in _WORDS]
        self._streams: dict[str, SimStream] = {}

    def forward(self, batch: ForwardBatch) -> list[int]:
        if batch.is_prebuilt:  # a PD decode node's handoff takes no model time
            return self.run(batch)
        duration = self.profile.batch_time(batch)
        next_ids = self.run(batch)
        self._clock.sleep(duration)
        return next_ids

    def run(self, batch: ForwardBatch) -> list[int]:
        """The step's token ids without waiting out its time (a DP group waits for all ranks)."""
        if batch.is_prefill or batch.is_prebuilt:
            # (sum of prompt lens,) int64: what a GPU engine copies to the device (a PD decode
            # node builds it too, as upstream's prepare_for_prebuilt; each first token is the
            # prefill node's)
            self._storage.to_tensor([r.fill_ids for r in batch.reqs])
            for req in batch.reqs:
                self._streams[req.rid] = SimStream(self._stream_seed(req), self._word_ids, self._eos)
        else:
            # (batch,) int64: each request's last token
            torch.tensor([r.output_ids[-1] for r in batch.reqs], dtype=torch.int64)
        return [self._streams[r.rid].next_token(r.sampling.ignore_eos) for r in batch.reqs]

    def release(self, req) -> None:
        self._streams.pop(req.rid, None)

    def _stream_seed(self, req) -> int:
        prompt = req.origin_input_ids
        prompt_bytes = prompt.tobytes() if isinstance(prompt, array) else array("q", prompt).tobytes()
        user_seed = req.sampling.seed or 0
        return zlib.crc32(prompt_bytes) ^ (user_seed * 1_000_003) ^ (req.choice_index * 7919) ^ self._seed
