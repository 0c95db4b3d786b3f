"""The named scenarios: which server forms to start and what load to drive, at a given scale."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from harness.forms import REGIMES, STORM_FORMS, Form, all_legacy, all_optimized, by_name
from harness.load import Load
from harness.provenance import TORCH_ENGINE

SMALLEST_SCALE = 0.01
QUEUE_TRIGGER = ("--enable-prefill-delayer", "--prefill-delayer-queue-min-ratio", "0.1")
DP_ATTENTION = ("--dp-size", "4", "--enable-dp-attention", "--sim-profile", "gb200-moe-dp")


@dataclass(frozen=True)
class Run:
    """One server form under one load; the form's name is unique within a scenario and names its files."""

    form: Form
    load: Load
    params: dict = field(default_factory=dict, hash=False)

    @property
    def name(self) -> str:
        return self.form.name

    @property
    def flags(self) -> tuple[str, ...]:
        return self.form.flags


@dataclass(frozen=True)
class Scenario:
    """A named set of runs; ``build(scale)`` gives the runs, the first one is the baseline."""

    name: str
    title_template: str
    hot_paths: tuple[str, ...]
    description: str
    build: Callable[[float], tuple[Run, ...]]
    plots: tuple[str, ...] = ("throughput", "itl")
    is_torch: bool = False

    @property
    def fingerprint_excludes(self) -> tuple[str, ...]:
        """The code its runs never execute (the torch engine, unless it runs on it)."""
        return () if self.is_torch else (TORCH_ENGINE,)

    def runs(self, scale: float) -> tuple[Run, ...]:
        """The runs at ``scale`` (1.0: the default sizes)."""
        if not SMALLEST_SCALE <= scale <= 1.0:
            raise ValueError(f"scale must be in [{SMALLEST_SCALE}, 1.0], got {scale}")
        return self.build(scale)

    def title(self, scale: float = 1.0) -> str:
        """The title with the sizes actually run at ``scale`` (the first run's load)."""
        title = self.title_template.format(**asdict(self.runs(scale)[0].load))
        return title if scale == 1.0 else f"{title} (scale {scale:g} of the default)"


def scaled(value: int, scale: float, floor: int) -> int:
    """``value`` shrunk by ``scale``, never below ``floor``."""
    return max(floor, round(value * scale))


def _in(common: tuple[str, ...], form: Form) -> Form:
    return Form(form.name, (*common, *form.flags))


def _runs(load: Load, common: tuple[str, ...], forms: tuple[Form, ...]) -> tuple[Run, ...]:
    return tuple(Run(_in(common, form), load) for form in forms)


def _storm_in(regime: str, ipc_recv: tuple[str, ...] = ("yield",)) -> Callable[[float], tuple[Run, ...]]:
    def build(scale: float) -> tuple[Run, ...]:
        streams = scaled(2048, scale, 8)
        load = Load(streams, streams, scaled(128, scale, 16), scaled(128, scale, 32))
        return tuple(Run(_in(REGIMES[regime], by_name(name).under(recv)), load, {"ipc_recv": recv})
                     for recv in ipc_recv for name in STORM_FORMS)
    return build


def _long_output(scale: float) -> tuple[Run, ...]:
    streams, input_len = scaled(16, scale, 4), scaled(128, scale, 16)
    output_len = scaled(16384, scale, 512)
    common = ("--sim-profile", "zero")
    forms = (all_legacy(), all_optimized(), by_name("H3-legacy-only"), by_name("H6-legacy-only"),
             Form("optimized-incremental", ("--incremental-streaming-output",)))
    runs = _runs(Load(streams, streams, input_len, output_len), common, forms)
    sweep = tuple(Run(_in(common, Form(f"{form.name}-L{length}", form.flags)),
                      Load(streams, streams, input_len, length), {"form": form.name, "sweep": True})
                  for form in (all_legacy(), all_optimized())
                  for length in (output_len // 8, output_len // 4, output_len // 2))
    return runs + sweep


def _long_prompt(scale: float) -> tuple[Run, ...]:
    # NOTE: loadgen's random text comes to ~4.52 tokens of the embedded byte-level tokenizer per
    # loadgen token, so 22,100 loadgen tokens make prompts of ~100K server tokens.
    load = Load(2, scaled(4, scale, 2), scaled(22_100, scale, 450), scaled(1024, scale, 128))
    return _runs(load, (), (all_legacy(), all_optimized()))


def _osl_variance(scale: float) -> tuple[Run, ...]:
    runs = []
    for concurrency, floor in ((16, 2), (64, 4), (128, 8)):
        streams = scaled(concurrency, scale, floor)
        for ratio in (1.0, 0.8):
            length = scaled(1000, scale, 64)
            load = Load(streams, 2 * streams, length, length, ratio)
            for delayer, flags in (("delayer-off", ()), ("queue-trigger", QUEUE_TRIGGER)):
                params = {"concurrency": streams, "range_ratio": ratio, "delayer": delayer}
                form = Form(f"c{streams}-r{ratio}-{delayer}", (*DP_ATTENTION, *flags))
                runs.append(Run(form, load, params))
    return tuple(runs)


def _torch(scale: float) -> tuple[Run, ...]:
    load = Load(scaled(8, scale, 2), scaled(32, scale, 4), scaled(128, scale, 16), scaled(64, scale, 64))
    return _runs(load, ("--engine", "torch", "--device", "auto"), (all_legacy(), all_optimized()))


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("storm", "{concurrency}-stream streaming-chat storm, {input_len}/{output_len} tokens, PD decode node",
             ("H1", "H2", "H6"),
             "Upstream's H1+H2 setting: a PD-disaggregated decode node (--disaggregation-mode decode, "
             "sim profile pd-decode-fast: KV arrives from a prefill node, no prefill compute, a 24 ms "
             "decode step at 2048 sequences, so the HTTP process limits throughput in every form). "
             "Every stream starts at once (concurrency = prompts), ignore_eos. H1 (wake-ups) and H2 "
             "(SSE encoding) toggled alone; all-legacy also carries H3 copy and H6 concat. Every form "
             "runs under both of upstream's IPC receive paths: --ipc-recv yield (upstream's default "
             "pickle IPC, a yield per message) and no-yield (SGLANG_USE_PICKLE_IPC=0, msgpack: no "
             "yield while a backlog lasts; runs named *-no-yield).",
             _storm_in("pd-decode", ("yield", "no-yield"))),
    Scenario("storm-pd-decode-h100", "{concurrency}-stream streaming-chat storm, {input_len}/{output_len} tokens, PD decode node on one H100",
             ("H1", "H2", "H6"),
             "The storm on a decode node modelled as one H100 serving Llama-3.1-8B (sim profile "
             "pd-decode-h100: 70 ms a step at 2048 sequences): the legacy HTTP process is the limit, "
             "the optimized one is not.", _storm_in("pd-decode-h100")),
    Scenario("storm-h100-llama-8b", "{concurrency}-stream streaming-chat storm, {input_len}/{output_len} tokens, one H100",
             ("H1", "H2", "H6"),
             "The storm on one modelled H100 serving an 8B model (sim profile h100-llama-8b: prefill "
             "and decode on the same node), where the model's steps, not the HTTP process, set the "
             "pace.", _storm_in("h100-llama-8b")),
    Scenario("long-output", "{output_len}-token outputs, default non-incremental streaming", ("H3", "H6"),
             "Few streams with 16,384 output tokens each, default (non-incremental) streaming, sim "
             "engine with the zero profile so the CPU pipeline sets the pace (as a small model on a "
             "fast GPU does upstream). H3 (per-step copy) and H6 (string deltas) toggled alone; "
             "optimized-incremental is the deltas-only mode for reference. all-legacy and "
             "all-optimized also run at 1/8, 1/4 and 1/2 of the output length for the "
             "cost-vs-length plot.", _long_output,
             ("throughput", "itl", "growth")),
    Scenario("long-prompt", "long prompts ({input_len} loadgen tokens, ~4.5x server tokens)", ("H4",),
             "Four requests, two at a time, with ~100,000-token prompts (server count: loadgen's "
             "random text of 22,100 tokens) and 1,024 output tokens, sim engine "
             "h100-llama-8b; the scheduler process holds the token ids (list vs array('q')).",
             _long_prompt, ("throughput", "itl", "cpu")),
    Scenario("osl-variance", "output-length variance and the prefill delayer, ISL = OSL = {input_len}", ("H5",),
             "Upstream's H5 regime: DP attention over 4 lockstep ranks (--dp-size 4 "
             "--enable-dp-attention, sim profile gb200-moe-dp: an extend on any rank makes every rank "
             "run an eager ~250 ms step). Input = output = 1000 tokens with range ratio 1.0 or 0.8, "
             "prefill delayer off or on with the queue trigger (--prefill-delayer-queue-min-ratio "
             "0.1, upstream's default), concurrency 16 / 64 / 128 with twice as many prompts.",
             _osl_variance,
             ("osl",)),
    Scenario("torch", "torch engine, {concurrency} streams, {input_len}/{output_len} tokens", ("H1", "H2", "H3", "H4", "H6"),
             "The torch engine (embedded small Llama, seeded weights) on whatever device is "
             "present (--device auto), all-legacy vs all-optimized.", _torch, is_torch=True),
)}
