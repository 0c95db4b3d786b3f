"""The reproduction table: each upstream claim in SPEC.md against the figure measured in the reports."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPORTS_DIR = Path(__file__).resolve().parent

Summaries = dict[str, dict]


@dataclass(frozen=True)
class Claim:
    """One upstream claim; ``measure`` turns the summaries into (figure here, ratio here)."""

    hot_path: str
    claim: str
    upstream_setting: str
    setting_here: str
    measure: Callable[[Summaries], tuple[str, str]]
    why: str


def load_summaries(reports_dir: Path = REPORTS_DIR) -> Summaries:
    """``summary.json`` of every report present, by scenario name."""
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(reports_dir.glob("*/summary.json"))}


def _run(summaries: Summaries, scenario: str, name: str) -> dict:
    return next(r for r in summaries[scenario]["runs"] if r["name"] == name)


def _lg(summaries: Summaries, scenario: str, name: str, key: str) -> float:
    return _run(summaries, scenario, name)["loadgen"][key]


def _pair(summaries, scenario, base, new, key, unit="", digits=0) -> tuple[str, str]:
    a, b = _lg(summaries, scenario, base, key), _lg(summaries, scenario, new, key)
    return f"{a:,.{digits}f} → {b:,.{digits}f}{unit}", _times(b / a)


def _times(r: float) -> str:
    return f"{r:.2f}x" if r >= 0.01 else f"1/{1 / r:,.0f}"


def _storm_tput(s):
    return _pair(s, "storm", "all-legacy", "all-optimized", "output_throughput", " tok/s")


def _storm_latency(s):
    parts, ratios = [], []
    for key, label in (("mean_tpot_ms", "TPOT"), ("mean_itl_ms", "mean ITL"), ("p99_itl_ms", "p99 ITL")):
        text, r = _pair(s, "storm", "all-legacy", "all-optimized", key, " ms", 1)
        parts.append(f"{label} {text}")
        ratios.append(f"{label} {r}")
    return "; ".join(parts), "; ".join(ratios)


def _h3_growth(s):
    fits = s["long-output"]["cost_by_length"]
    legacy, optimized = fits["all-legacy"]["loglog_slope"], fits["all-optimized"]["loglog_slope"]
    return (f"HTTP CPU per request vs output length, log-log slope: legacy {legacy:.2f}, "
            f"optimized {optimized:.2f}", f"slope {legacy:.2f} (upstream ≈ 2.0)")


def _h3_incremental(s):
    legacy, r_legacy = _pair(s, "long-output", "all-legacy", "optimized-incremental", "output_throughput")
    fixed, r_fixed = _pair(s, "long-output", "all-optimized", "optimized-incremental", "output_throughput")
    return (f"incremental vs default, tok/s: all-legacy {legacy}; all-optimized {fixed}",
            f"{r_legacy} (legacy); {r_fixed} (optimized)")


def _h3_tput(s):
    alone, r_alone = _pair(s, "long-output", "H3-legacy-only", "all-optimized", "output_throughput")
    every, r_every = _pair(s, "long-output", "all-legacy", "all-optimized", "output_throughput")
    ttft, r_ttft = _pair(s, "long-output", "all-legacy", "all-optimized", "median_ttft_ms", " ms")
    return (f"H3 alone: {alone} tok/s; all-legacy → all-optimized: {every} tok/s, median TTFT {ttft}",
            f"{r_alone} (H3 alone); {r_every} tput, {r_ttft} TTFT (all)")


def _h4(s):
    cpu = [_run(s, "long-prompt", n)["cpu_s"]["scheduler"] for n in ("all-legacy", "all-optimized")]
    tput, r = _pair(s, "long-prompt", "all-legacy", "all-optimized", "output_throughput", " tok/s", 1)
    return (f"scheduler CPU {cpu[0]:.2f} → {cpu[1]:.2f} s; {tput}",
            f"{cpu[1] / cpu[0]:.2f}x scheduler CPU; {r} tput")


def _osl_name(s, ratio, delayer, conc=None):
    runs = s["osl-variance"]["runs"]
    conc = conc or max(r["params"]["concurrency"] for r in runs)
    return f"c{conc}-r{ratio}-{delayer}"


def _h5_variance(key, unit, digits=0):
    def measure(s):
        return _pair(s, "osl-variance", _osl_name(s, 1.0, "delayer-off"), _osl_name(s, 0.8, "delayer-off"),
                     key, unit, digits)
    return measure


def _h5_steps(s):
    steps = [_run(s, "osl-variance", _osl_name(s, r, "delayer-off"))["metrics"]["num_prefill_steps"]
             for r in (1.0, 0.8)]
    return f"{steps[0]:.0f} → {steps[1]:.0f} prefill steps", f"{steps[1] / steps[0]:.1f}x"


def _h5_recovery(s):
    concs = sorted({r["params"]["concurrency"] for r in s["osl-variance"]["runs"]})
    parts, ratios = [], []
    for c in concs:
        off, on = (_run(s, "osl-variance", _osl_name(s, 0.8, d, c)) for d in ("delayer-off", "queue-trigger"))
        ratios.append(on["loadgen"]["output_throughput"] / off["loadgen"]["output_throughput"])
        parts.append(f"conc {c}: {ratios[-1]:.2f}x tok/s, prefill steps "
                     f"{off['metrics']['num_prefill_steps']:.0f} → {on['metrics']['num_prefill_steps']:.0f}")
    return "queue trigger / off at range ratio 0.8: " + "; ".join(parts), f"{min(ratios):.2f}x–{max(ratios):.2f}x"


def _h6(s):
    tput, r = _pair(s, "long-output", "H6-legacy-only", "all-optimized", "output_throughput", " tok/s")
    cpu = [_run(s, "long-output", n)["cpu_s"]["http"] for n in ("H6-legacy-only", "all-optimized")]
    return f"{tput}; HTTP CPU {cpu[0]:.1f} → {cpu[1]:.1f} s", f"{r} tput; {cpu[1] / cpu[0]:.2f}x CPU"


CLAIMS = (
    Claim("H1+H2", "≈ +20% streaming output throughput", "PD-disaggregated SGLang, 2048 concurrent streams",
          "storm: 2048 streams, 128/128 tokens, sim h100-llama-8b, 2 cores shared with the client",
          _storm_tput,
          "Here the HTTP process is not the bottleneck: it used 12.0 → 9.9 s of CPU in a 62 s run "
          "(-17%), while the modelled H100 steps for 2048 sequences set the pace; upstream's "
          "PD-disaggregated decode node saturates its tokenizer-manager process. The client is "
          "flagged client-bound (event-loop lag) on 2 shared cores."),
    Claim("H1+H2", "lower TPOT, no higher ITL", "as above", "storm, as above", _storm_latency,
          "Holds: TPOT on par, ITL lower; the p99 ITL drop comes from H1 (H1-legacy-only keeps "
          "9.5 s p99), H2 alone changes nothing measurable here."),
    Claim("H3", "copy + join per step 1.3 µs at 331 tokens → 21.3 µs at 5,247 (O(n) per step, O(n²) per request)",
          "SGLang tokenizer manager, per-step micro-measurement",
          "long-output: HTTP-process CPU per request at 1/8, 1/4, 1/2, 1 × 16,384 output tokens",
          _h3_growth,
          "Legacy is quadratic as upstream (slope above 2: with H1 legacy the starved consumers "
          "keep thousands of queued copies alive). Optimized non-incremental stays superlinear "
          "(1.72): ReqState.get_text joins the whole text for each emitted chunk (81% of HTTP "
          "samples); only incremental mode is linear."),
    Claim("H3", "default streaming 2.3x slower than incremental at 16K output tokens", "Qwen3-1.7B, 4×H200 DP 4",
          "long-output: 16 streams × 16,384 tokens, sim zero profile; all-legacy and all-optimized vs optimized-incremental",
          _h3_incremental,
          "Same direction, far larger: the sim engine's zero profile makes the HTTP process the "
          "only limit (upstream has real GPU steps), and the legacy run also carries H1/H2/H6."),
    Claim("H3", "8,004 → 14,618 output tok/s (+82.6%), TTFT 69,959 → 1,159 ms", "Qwen3-1.7B, 4×H200 DP 4, 400 prompts, rate 80, input 128, 16K outputs",
          "long-output: H3-legacy-only and all-legacy vs all-optimized", _h3_tput,
          "H3 alone gives 1.16x; the upstream-size effect (and the TTFT collapse: consumers starved "
          "for the whole 127 s run) appears only with every legacy form together, where the "
          "synchronous H1 handler never yields while it copies."),
    Claim("H4", "on par for short prompts, clear win for long prompts (tensor building)", "micro-benchmark, 2 requests, 1K/10K/100K prompt tokens, 1K decode steps",
          "long-prompt: 4 requests × ~100,000 prompt tokens (server count), 1,024 output, 2 at a time", _h4,
          "On par end to end, even for long prompts: the list → tensor build (~2.4 ms per 32K ids) "
          "happens once per prefill, invisible next to 4 s of modelled prefill; the win is a "
          "micro-benchmark one (see benchmarks/)."),
    Claim("H5", "range ratio 0.8 gives 0.49x the output throughput of 1.0 (7,830 → 3,846 tok/s)", "conc 128, ISL = OSL = 1000, large MoE on GB200",
          "osl-variance: conc 128, ISL = OSL = 1000, delayer off, sim h100-llama-8b",
          _h5_variance("output_throughput", " tok/s"),
          "No throughput loss here: one rank (no DP negotiation), a modelled prefill of 4 ms + "
          "40 µs/token, and a run that is CPU-bound on 2 cores (2.2K of ~8K tok/s the model allows)."),
    Claim("H5", "62x more prefill steps at range ratio 0.8", "as above", "as above", _h5_steps,
          "Same direction, much smaller: closed-loop clients refill one request at a time in both "
          "settings."),
    Claim("H5", "p99 decode gap 27.6 → 396.9 ms (14x)", "as above", "as above (p99 ITL per chunk)",
          _h5_variance("p99_itl_ms", " ms", 1),
          "Same direction: prefills between decode steps stretch the tail."),
    Claim("H5", "queue trigger recovers 1.16x–1.85x output throughput at conc 16–128", "as above",
          "osl-variance: range ratio 0.8, --prefill-delayer-queue-min-ratio 0.5 vs delayer off",
          _h5_recovery,
          "The trigger works as designed (about half the prefill steps) but cannot recover "
          "throughput that was not lost here; its delays cost up to 12% at conc 16."),
    Claim("H6", "string-concat deltas O(n²) per request → integer offsets O(n) (no figure given)",
          "SGLang chat/completions serving", "long-output: H6-legacy-only vs all-optimized", _h6,
          "No measurable change: the O(n) per-chunk text join of H3's optimized form dominates "
          "(see row 3), so removing the O(n) concat of H6 is lost in it."),
)


def table(summaries: Summaries, why: dict[int, str] | None = None) -> str:
    """The markdown reproduction table; a row reads "not run" when its report is missing."""
    lines = ["| # | hot path | upstream claim | upstream setting | measured here | setting here | ratio here | why they differ |",
             "|---|---|---|---|---|---|---|---|"]
    for i, claim in enumerate(CLAIMS, 1):
        try:
            measured, ratio = claim.measure(summaries)
        except (KeyError, StopIteration, ZeroDivisionError, TypeError):
            measured, ratio = "not run", ""
        note = (why or {}).get(i, claim.why)
        lines.append(f"| {i} | {claim.hot_path} | {claim.claim} | {claim.upstream_setting} | {measured} | "
                     f"{claim.setting_here} | {ratio} | {note} |")
    return "\n".join(lines) + "\n"
