"""A load: what one loadgen run sends, and the one place that turns it into loadgen's flags."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Load:
    """Closed loop at ``concurrency``: random prompts of ``input_len`` loadgen tokens, streamed chat.

    ``dataset`` replaces the random prompts with other loadgen dataset flags (e.g. a custom
    prompt file); ``extra`` holds further loadgen flags passed as they are.
    """

    concurrency: int
    num_prompts: int
    input_len: int
    output_len: int
    range_ratio: float = 1.0
    ignore_eos: bool = True
    seed: int | None = None
    dataset: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()

    def __post_init__(self):
        for name in ("concurrency", "num_prompts", "input_len", "output_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 < self.range_ratio <= 1.0:
            raise ValueError(f"range_ratio must be in (0, 1], got {self.range_ratio}")

    def loadgen_args(self) -> list[str]:
        """The loadgen flags for this load."""
        args = ["--concurrency", str(self.concurrency), "--num-prompts", str(self.num_prompts),
                *(self.dataset or ("--random-input-len", str(self.input_len), "--random-output-len",
                                   str(self.output_len), "--random-range-ratio", str(self.range_ratio)))]
        if self.ignore_eos:
            args.append("--ignore-eos")
        if self.seed is not None:
            args += ["--seed", str(self.seed)]
        return [*args, *self.extra]
