"""Model engines behind one interface: ``sim`` (seeded tokens, latency model) and ``torch``
(a Llama-family model in torch, imported only when chosen)."""

from __future__ import annotations

from reference_impl.config import ServerArgs
from reference_impl.engine.base import (
    Clock,
    Engine,
    ForwardBatch,
    RealClock,
    VirtualClock,
    make_clock,
)


def make_engine(args: ServerArgs, tokenizer, storage, clock: Clock) -> Engine:
    """The engine named by ``args.engine``."""
    if args.engine == "torch":
        from reference_impl.engine.torch_engine import TorchEngine

        return TorchEngine(args, tokenizer, storage)
    from reference_impl.engine.sim import SimEngine

    return SimEngine(tokenizer, storage, clock, profile=args.sim_profile, seed=args.sim_seed,
                     max_total_num_tokens=args.max_total_tokens)


__all__ = ["Clock", "Engine", "ForwardBatch", "RealClock", "VirtualClock", "make_clock", "make_engine"]
