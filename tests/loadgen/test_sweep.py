"""`loadgen sweep`: the SLO bisection finds a scripted server's known knee, early stop on
over-saturation, t-intervals over repeats, client-bound points left out, compare and report of sweeps."""

from __future__ import annotations

import html
import json
import subprocess
import sys

import pytest
from rich.console import Console

from loadgen.plan.config import SLO, RunConfig
from loadgen.plan.datasets import DatasetConfig
from loadgen.report.sweep_tables import (
    CLIPPED_NOTE,
    cell,
    compare_sweeps,
    fit_widths,
    print_sweep_table,
)
from loadgen.run.runner import run
from loadgen.selftest.testserver import spawn
from loadgen.sweep.driver import SweepSpec, _failed_text, exit_code, run_sweep
from loadgen.sweep.search import aggregate, bracket, next_probe, oversaturated, quantile_interval
from loadgen.sweep.stats import interval, significant, t975

# NOTE: a request takes 20 + 9 x 15 = 155 ms; above --capacity a request waits for a whole one, so its
# TTFT is about 175 ms, against 20 ms at or below capacity: the SLO (80 ms) sits far from both.
KNEE_SERVER = ("--ttft-ms", "20", "--gap-ms", "15", "--num-tokens", "10")
SMALL = ("--num-prompts", "16", "--prompts-per-level", "4", "--random-input-len", "32",
         "--random-output-len", "10", "--no-server-metrics", "--quiet")


def _loadgen(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loadgen", *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def knee_sweep(tmp_path_factory) -> dict:
    """One real sweep against a server serving 6 streams at once: 1,2,4,8,16 then the search."""
    proc, url = spawn(*KNEE_SERVER, "--capacity", "6")
    out = tmp_path_factory.mktemp("sweep") / "knee.json"
    try:
        done = _loadgen("sweep", "--base-url", url, "--concurrency", "1,2,4,8,16", "--slo", "ttft=80",
                        *SMALL, "--output", str(out))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert done.returncode == 0, done.stderr
    return {"path": str(out), "data": json.loads(out.read_text())}


def _skip_unless_the_knee_was_measured(data: dict) -> None:
    """A point the client could not measure (client-bound: on a busy machine, the client waited for
    a CPU) is left out of the search by design; below 16 that moves the bracket, so skip then."""
    bound = sorted(p["value"] for p in data["points"] if p["client_bound"])
    assert data["answer"]["client_bound_excluded"] == bound
    if set(bound) - {16}:
        pytest.skip(f"the machine was too busy to measure the knee: points {bound} were client-bound")


def test_search_finds_the_known_knee(knee_sweep):
    data = knee_sweep["data"]
    assert data["kind"] == "sweep" and data["variable"] == "concurrency"
    _skip_unless_the_knee_was_measured(data)
    answer = data["answer"]
    assert answer["bracket"] == [6, 7], answer["text"]
    assert answer["percentile"] == 99.0
    assert [f["metric"] for f in answer["failed_at_lowest_failing"]] == ["p99_ttft_ms"]
    search = [p["value"] for p in data["points"] if p["phase"] == "search"]
    assert sorted(search) == [6, 7] and data["search"]["steps_used"] == 2
    for point in data["points"]:
        assert len(point["runs"]) == 1 and point["runs"][0]["max_concurrency"] == point["value"]
        assert point["runs"][0]["completed"] == max(16, 4 * point["value"])
        assert point["slo"]["passed"] is (point["value"] <= 6)


def test_report_draws_the_sweep(knee_sweep, tmp_path):
    _skip_unless_the_knee_was_measured(knee_sweep["data"])
    page = tmp_path / "sweep.html"
    done = _loadgen("report", knee_sweep["path"], "--output", str(page))
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    assert "Throughput vs latency (Pareto)" in text and "src='data:image/png;base64," in text
    assert html.escape(knee_sweep["data"]["answer"]["text"]) in text and "[6, 7]" in text


def test_report_and_compare_refuse_a_mix_of_sweeps_and_runs(knee_sweep, tmp_path):
    run = tmp_path / "run.json"
    run.write_text(json.dumps(knee_sweep["data"]["points"][0]["runs"][0]))
    report = _loadgen("report", knee_sweep["path"], str(run), "--output", str(tmp_path / "x.html"))
    compare = _loadgen("compare", str(run), knee_sweep["path"])
    for done in (report, compare):
        assert done.returncode == 2 and "cannot mix sweep files" in done.stderr


def test_sweep_past_capacity_stops_early_with_intervals(start_server, tmp_path):
    server = start_server(*KNEE_SERVER, "--capacity", "2")
    out = tmp_path / "sat.json"
    done = _loadgen("sweep", "--base-url", server.base_url, "--concurrency", "2,4,8,16", "--repeats", "2",
                    *SMALL, "--output", str(out))
    assert done.returncode == 0, done.stderr
    data = json.loads(out.read_text())
    stop = data["early_stop"]
    assert stop["stopped_at"] == 4 and stop["not_run"] == [8, 16], stop
    assert [p["value"] for p in data["points"]] == [2, 4] and data["answer"] is None
    for point in data["points"]:
        assert len(point["runs"]) == 2
        tput = point["metrics"]["output_throughput"]
        assert tput["n"] == 2 and tput["kind"] == "min-max"  # 2 repeats: their min and max, said so
        values = sorted(run["output_throughput"] for run in point["runs"])
        assert (tput["low"], tput["high"]) == tuple(values)


@pytest.mark.parametrize("flags", [("--concurrency", "1,x"), ("--concurrency", "1,1"), ("--concurrency", "0,2"),
                                   ("--request-rate", "1,-2"), ("--concurrency", "1,2", "--request-rate", "1"),
                                   ("--num-prompts", "4"), ("--concurrency", "1", "--csv", "x.csv"),
                                   ("--concurrency", "1,2", "--slo", "ttft=1,ttft=2"),
                                   ("--concurrency", "1,2", "--goodput", "ttft:1", "ttft:2")])
def test_bad_sweep_flags_are_usage_errors(flags):
    done = _loadgen("sweep", *flags, timeout=60)
    assert done.returncode == 2 and "usage: loadgen sweep" in done.stderr


def test_t_interval_on_known_numbers():
    stat = interval([10.0, 12.0, 14.0])
    assert stat["mean"] == 12.0 and stat["std"] == pytest.approx(2.0)
    half = 4.3027 * 2.0 / 3 ** 0.5  # t(0.975, 2) = 4.3027
    assert (stat["low"], stat["high"]) == pytest.approx((12.0 - half, 12.0 + half))
    assert interval([5.0])["low"] is None and interval([None]) is None
    assert t975(1) == pytest.approx(12.7062) and t975(100) == pytest.approx(1.98397, abs=1e-4)


def test_t975_reads_the_table_to_30_then_the_expansion():
    assert t975(2) == 4.3027 and t975(30) == 2.0423  # the table's last row, not the expansion's 2.04218
    z = 1.959964
    for df, exact in ((31, 2.039513), (40, 2.021075), (100, 1.983972), (1000, 1.962339)):
        # Abramowitz & Stegun 26.7.5 to the 1/df^2 term, within 1e-4 of the exact quantile
        expansion = z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        assert t975(df) == pytest.approx(expansion, abs=1e-12) and t975(df) == pytest.approx(exact, abs=1e-4)
    with pytest.raises(ValueError, match=r"^df must be >= 1$"):
        t975(0)


def test_interval_returns_every_key_for_one_two_and_three_repeats():
    assert interval([5, True, "x", None]) == {"n": 1, "mean": 5.0, "std": None, "low": None, "high": None,
                                              "kind": None}
    two = interval([1.0, 3.0])
    assert two == {"n": 2, "mean": 2.0, "std": pytest.approx(2 ** 0.5), "low": 1.0, "high": 3.0, "kind": "min-max"}
    three = interval([10.0, 12.0, 14.0])
    half = 4.3027 * 2.0 / 3 ** 0.5
    assert three == {"n": 3, "mean": 12.0, "std": pytest.approx(2.0), "low": pytest.approx(12.0 - half),
                     "high": pytest.approx(12.0 + half), "kind": "t95"}


def test_touching_intervals_are_not_significant():
    a = {"n": 3, "mean": 1.0, "low": 0.0, "high": 2.0, "kind": "t95"}
    b = {"n": 3, "mean": 3.0, "low": 2.0, "high": 4.0, "kind": "t95"}
    assert significant(a, b) is False and significant(b, a) is False
    assert significant(a, {**b, "low": 2.001}) is True and significant({**b, "low": 2.001}, a) is True


def test_significance_is_non_overlap_of_the_intervals():
    a, b = interval([10.0, 10.2, 9.8]), interval([12.0, 12.2, 11.8])
    assert significant(a, b) is True
    assert significant(a, interval([10.1, 10.5, 9.9])) is False
    assert significant(a, interval([12.0])) is None
    # NOTE: two min-max ranges of 2 repeats miss each other by chance one time in three: not judged
    assert significant(interval([1.0, 2.0]), interval([10.0, 11.0])) is None
    assert significant(a, interval([12.0, 12.2])) is None


def test_two_repeats_give_their_min_and_max_not_a_t_interval():
    two = interval([67.1, 97.1])  # a t-interval would be 82.1 ± 190.6, wider than the data
    assert two["kind"] == "min-max" and (two["low"], two["high"]) == (67.1, 97.1)
    assert two["mean"] == pytest.approx(82.1) and cell(two) == "82.1 (67.1 – 97.1)"
    three = interval([10.0, 12.0, 14.0])
    assert three["kind"] == "t95" and cell(three) == "12.0 ± 5.0"
    assert interval([5.0])["kind"] is None and cell(interval([5.0])) == "5.0"
    old = {"n": 2, "mean": 82.1, "low": -316.2, "high": 480.4}  # a file from before `kind`
    assert cell(old) == "82.1 ± 398.3"


def _point(value: float, tput: float, ttft: float, e2e: float, bound: bool = False) -> dict:
    run = {"output_throughput": tput, "median_ttft_ms": ttft, "p99_ttft_ms": ttft * 1.2,
           "median_e2e_latency_ms": e2e, "client_bound": bound}
    return aggregate(value, [run, run], SLO(ttft_ms=50.0), 99.0)


def test_over_saturation_rule_both_ways():
    prev = _point(4, 1000.0, 20.0, 200.0)
    assert oversaturated(prev, _point(8, 1020.0, 45.0, 210.0))["stop"] is True  # flat, TTFT x2.25
    assert oversaturated(prev, _point(8, 1020.0, 20.0, 320.0))["stop"] is True  # flat, E2E x1.6
    assert oversaturated(prev, _point(8, 1800.0, 45.0, 400.0))["stop"] is False  # still growing
    assert oversaturated(prev, _point(8, 1000.0, 25.0, 250.0))["stop"] is False  # flat, latency x1.25
    assert oversaturated(prev, _point(8, 1000.0, 90.0, 900.0, bound=True))["stop"] is False


def test_client_bound_points_are_left_out_of_the_answer():
    points = [_point(1, 100, 10, 100), _point(2, 200, 20, 100), _point(4, 300, 30, 100, bound=True),
              _point(8, 300, 90, 100)]
    assert points[2]["slo"]["passed"] is None  # its latency meets the SLO, but it is not trusted
    assert bracket(points) == {"highest_passing": 2, "lowest_failing": 8, "unknown": [4], "marginal": []}
    points[3] = _point(8, 300, 30, 100, bound=True)
    assert bracket(points) == {"highest_passing": 2, "lowest_failing": None, "unknown": [4, 8], "marginal": []}


def test_quantile_interval_brackets_the_percentile_with_order_statistics():
    values = list(range(1, 1001))  # 1..1000 ms: p99 = 990.01
    q = quantile_interval(values, 99.0)
    # ranks floor(990 - 1.96 * sqrt(9.9)) = 983 and ceil(990 + 6.17) + 1 = 998 (1-based)
    assert q["n"] == 1000 and q["value"] == pytest.approx(990.01)
    assert (q["low"], q["high"]) == (983.0, 998.0)
    few = quantile_interval([5.0, 1.0, 3.0], 99.0)
    assert few["high"] == 5.0 and few["low"] <= few["value"] <= few["high"]  # clipped to the sample
    assert quantile_interval([], 99.0) is None


def test_pooled_verdict_is_pass_fail_or_marginal():
    slo = SLO(ttft_ms=990.0)
    run = {"output_throughput": 1.0, "client_bound": False}

    def verdict(values):
        return aggregate(1, [run], slo, 99.0, pooled={"ttft": values, "tpot": [], "e2e_latency": []})["slo"]

    assert verdict(list(range(1, 1001)))["verdict"] == "marginal"  # 990 inside [983, 998]
    assert verdict([v * 0.9 for v in range(1, 1001)])["verdict"] == "pass"  # high end 898 <= 990
    failed = verdict([v * 1.1 for v in range(1, 1001)])
    assert failed["verdict"] == "fail" and failed["passed"] is False  # low end 1081 > 990
    assert failed["failed"][0]["low"] == pytest.approx(1081.3)
    points = [aggregate(v, [run], slo, 99.0, pooled={"ttft": [x * f for x in range(1, 1001)]})
              for v, f in ((1, 0.5), (2, 1.0), (4, 2.0))]
    assert bracket(points) == {"highest_passing": 1, "lowest_failing": 4, "unknown": [], "marginal": [2]}


def test_a_point_with_failed_requests_or_a_lost_worker_never_passes():
    slo = SLO(ttft_ms=990.0)
    fast = {"ttft": [10.0] * 8, "tpot": [], "e2e_latency": []}  # every successful request far inside the bound
    ok = {"output_throughput": 1.0, "client_bound": False, "completed": 8, "failed": 0}
    assert aggregate(1, [ok], slo, 99.0, pooled=fast)["slo"]["verdict"] == "pass"
    half = aggregate(1, [{**ok, "completed": 4, "failed": 4}], slo, 99.0, pooled=fast)
    assert half["failed_requests"] == 4 and half["slo"]["verdict"] == "fail" and half["slo"]["passed"] is False
    assert half["slo"]["failed"][0] == {"metric": "failed_requests", "value": 4, "low": 4, "high": 4, "bound": 0}
    lost = aggregate(1, [ok, {**ok, "workers_lost": 1}], slo, 99.0, pooled=fast)["slo"]
    assert lost["verdict"] == "fail" and lost["failed"][0]["metric"] == "workers_lost"
    every = aggregate(1, [{**ok, "completed": 0, "failed": 8}], slo, 99.0, pooled={"ttft": []})["slo"]
    assert every["verdict"] == "fail"  # no latency to judge, but every request failed
    rebuilt = aggregate(1, [{**ok, "failed": 2, "p99_ttft_ms": 10.0}], slo, 99.0)["slo"]  # from a saved file
    assert rebuilt["verdict"] == "fail"


def test_a_point_failing_past_max_error_rate_stops_the_sweep_and_keeps_it(start_server, tmp_path):
    server = start_server(*KNEE_SERVER, "--faults", "ok,http_500")  # every second request fails
    out = tmp_path / "failing.json"
    done = _loadgen("sweep", "--base-url", server.base_url, "--concurrency", "1,2,4", "--slo", "ttft=500",
                    "--max-error-rate", "0.25", *SMALL, "--output", str(out))
    data = json.loads(out.read_text())
    assert done.returncode == 4 and "stopped at concurrency=1" in done.stderr, done.stderr
    assert data["stopped"] == {"value": 1, "reason": data["stopped"]["reason"], "not_run": [2, 4]}
    assert "8 of 16 requests failed (above --max-error-rate 0.25" in data["stopped"]["reason"]
    [point] = data["points"]
    assert point["failed_requests"] == 8 and point["slo"]["verdict"] == "fail"
    assert data["answer"]["bracket"] == [None, 1] and "8 failed requests" in data["answer"]["text"]


@pytest.mark.parametrize("with_model", [False, True], ids=["model-listed", "model-given"])
def test_a_server_killed_mid_sweep_keeps_the_finished_point_and_exits_4(tmp_path, with_model):
    proc, url = spawn(*KNEE_SERVER)
    out = tmp_path / "killed.json"
    flags = ["sweep", "--base-url", url, "--concurrency", "1,2,4,8", "--slo", "ttft=500", "--num-prompts", "8",
             "--random-input-len", "32", "--random-output-len", "10", "--no-server-metrics", "--no-server-tokenize",
             "--output", str(out), *(["--model", "scripted-model"] if with_model else [])]
    sweep = subprocess.Popen([sys.executable, "-m", "loadgen", *flags], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        for line in sweep.stderr:
            if "concurrency=1 repeat 1/1" in line:  # the first point finished: kill the server now
                break
        proc.kill()
        proc.wait(timeout=10)
        err = sweep.stderr.read()
        rc = sweep.wait(timeout=240)
    finally:
        for p in (proc, sweep):
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    assert rc == 4 and "stopped at concurrency=" in err, err
    data = json.loads(out.read_text())
    first = data["points"][0]
    assert first["value"] == 1 and first["runs"][0]["completed"] == 8
    # NOTE: on a busy machine the client may be judged bound even at one stream: then "unknown".
    assert first["slo"]["verdict"] == ("unknown" if first["client_bound"] else "pass")
    reason = data["stopped"]["reason"]
    # NOTE: the kill lands after the first point; the second either cannot list models (no --model)
    # or, with --model (or if its set-up won the race), sends requests that fail.
    allowed = ("requests failed",) if with_model else ("cannot list models", "requests failed")
    assert any(why in reason for why in allowed), reason
    assert data["stopped"]["not_run"] and 8 in data["stopped"]["not_run"]
    assert all(p["slo"]["verdict"] == "fail" for p in data["points"] if p["failed_requests"]), data["points"]


def test_ctrl_c_while_a_run_is_set_up_keeps_the_finished_points(start_server):
    server = start_server("--ttft-ms", "5", "--gap-ms", "2", "--num-tokens", "4")
    calls = []

    def runner(cfg, dcfg):
        calls.append(cfg.concurrency)
        if len(calls) == 2:
            raise KeyboardInterrupt  # as Ctrl-C lands while the second point lists models or forks
        return run(cfg, dcfg)

    cfg = RunConfig(base_url=server.base_url, concurrency=1, num_prompts=4, server_metrics=False)
    dcfg = DatasetConfig(random_input_len=8, random_output_len=4, use_server_tokenize=False)
    data = run_sweep(SweepSpec("concurrency", (1, 2, 4), slo=SLO(ttft_ms=500.0)), cfg, dcfg, log=lambda _: None,
                     runner=runner)
    assert calls == [1, 2] and data["interrupted"] and exit_code(data) == 130
    assert [p["value"] for p in data["points"]] == [1] and data["points"][0]["runs"][0]["completed"] == 4


def test_bisection_steps():
    assert next_probe(4, 8, integer=True, rel_tol=0.05) == 6
    assert next_probe(6, 7, integer=True, rel_tol=0.05) is None
    assert next_probe(2.0, 4.0, integer=False, rel_tol=0.05) == 3.0
    assert next_probe(2.0, 2.05, integer=False, rel_tol=0.05) is None
    assert next_probe(None, 4, integer=True, rel_tol=0.05) is None


def _sweep(tputs: dict[int, list[float]]) -> dict:
    points = [{"value": v, "phase": "sweep", "client_bound": False,
               "metrics": {"output_throughput": interval(xs)}} for v, xs in tputs.items()]
    return {"kind": "sweep", "variable": "concurrency", "points": points, "answer": None}


def test_compare_marks_differences_outside_the_intervals():
    base = _sweep({1: [100.0, 101.0, 99.0], 8: [500.0, 505.0, 495.0]})
    other = _sweep({1: [100.5, 101.5, 99.5], 8: [600.0, 606.0, 594.0]})
    console = Console(record=True, width=200)
    compare_sweeps([base, other], ["base", "other"], console)
    rows = {line.split("│")[1].strip(): line for line in console.export_text().splitlines() if "output" in line}
    assert rows["8"].rstrip("│ ").endswith("*") and "(1.20x)" in rows["8"]
    assert not rows["1"].rstrip("│ ").endswith("*")


def _table_sweep(repeats: int, pooled: dict | None = None) -> dict:
    runs = [{"output_throughput": 12345.6 + 100 * i, "request_throughput": 12.3 + i, "median_ttft_ms": 82.1 + 30 * i,
             "p99_ttft_ms": 1234.5 + 10 * i, "median_tpot_ms": 12.3 + i, "p99_tpot_ms": 45.6 + i,
             "median_e2e_latency_ms": 1234.5 + i, "p99_e2e_latency_ms": 12345.6 + i, "request_goodput": 11.1 + i,
             "client_bound": True} for i in range(repeats)]
    point = aggregate(64, runs, SLO(ttft_ms=100.0), 99.0, phase="search", pooled=pooled)
    point["saturation"] = {"stop": True}
    return {"variable": "concurrency", "repeats": repeats, "points": [point]}


@pytest.mark.parametrize("repeats", [2, 3])
def test_the_sweep_table_says_its_spread_and_never_cuts_a_verdict(repeats):
    console = Console(record=True, width=160)
    print_sweep_table(_table_sweep(repeats), console)
    text = console.export_text()
    assert "…" not in text  # was: `client-bou…`, `over-satura…`
    for mark in ("unknown,", "client-bound,", "over-saturated,", "search"):
        assert mark in text, text
    if repeats == 2:
        assert "mean (min–max of the two)" in text and "(82.1" in text and "112.1)" in text and "±" not in text
    else:
        assert "mean ± 95% t-interval half-width" in text and "±" in text
    assert max(len(line) for line in text.splitlines()) <= 160


def test_column_widths_fit_the_room_without_cutting_a_word():
    assert fit_widths([3, 5, 4], [10, 20, 4], 100) == [10, 20, 4]  # room enough: each at its widest
    widths = fit_widths([3, 5, 4], [10, 20, 4], 20)
    assert sum(widths) == 20 and all(w >= m for w, m in zip(widths, [3, 5, 4], strict=True))
    assert fit_widths([3, 5, 4], [10, 20, 4], 5) == [3, 5, 4]  # the words alone are wider: never below


def test_a_percentile_interval_clipped_to_the_sample_is_marked():
    few = quantile_interval([float(x) for x in range(1, 17)], 99.0)  # 16 requests: p99's rank lies past them
    assert few["clipped"] == "high" and few["high"] == 16.0
    assert quantile_interval(list(range(1, 1001)), 99.0)["clipped"] is None
    assert quantile_interval([1.0, 2.0], 50.0)["clipped"] == "both"
    sweep = _table_sweep(2, pooled={"ttft": [float(x) for x in range(1, 17)]})
    console = Console(record=True, width=160)
    print_sweep_table(sweep, console)
    text = console.export_text()
    assert "16.0 clipped]" in text and CLIPPED_NOTE in text.replace("\n", " ")
    failed = {"metric": "p99_ttft_ms", "value": 15.9, "low": 14.0, "high": 16.0, "bound": 10.0, "clipped": "high"}
    assert _failed_text(failed) == "p99_ttft_ms 15.9 [14.0, 16.0 clipped] > 10"


def _verdict_of(p99s: list[float], bound: float) -> str:
    """The SLO verdict of a point rebuilt from saved runs (no pooled latencies), one p99 per repeat."""
    runs = [{"p99_ttft_ms": v, "client_bound": False} for v in p99s]
    return aggregate(1, runs, SLO(ttft_ms=bound), 99.0)["slo"]["verdict"]


def test_slo_boundary_over_repeats_uses_the_interval_shown():
    # 2 repeats: the min-max range [40, 50]: passes up to its high end, fails past its low end
    assert _verdict_of([40.0, 50.0], 50.0) == "pass"
    assert _verdict_of([40.0, 50.0], 49.99) == "marginal"  # was pass: the mean (45) alone was judged
    assert _verdict_of([40.0, 50.0], 40.0) == "marginal"
    assert _verdict_of([40.0, 50.0], 39.99) == "fail"
    # 3 repeats: the t-interval 45 ± 4.3027 * 5 / sqrt(3) = [32.58, 57.42]
    high = 45.0 + 4.3027 * 5.0 / 3 ** 0.5
    assert _verdict_of([40.0, 45.0, 50.0], high + 0.01) == "pass"
    assert _verdict_of([40.0, 45.0, 50.0], high - 0.01) == "marginal"
    assert _verdict_of([40.0, 45.0, 50.0], 90.0 - high - 0.01) == "fail"
    assert _verdict_of([45.0], 45.0) == "pass" and _verdict_of([45.0], 44.99) == "fail"


def test_slo_boundary_on_pooled_requests_is_the_interval_high_end_inclusive():
    run = {"output_throughput": 1.0, "client_bound": False}

    def verdict(values, bound):
        return aggregate(1, [run, run], SLO(ttft_ms=bound), 99.0, pooled={"ttft": values})["slo"]["verdict"]

    values = [float(v) for v in range(1, 1001)]  # p99 interval [983, 998], not clipped
    assert verdict(values, 998.0) == "pass" and verdict(values, 997.99) == "marginal"
    assert verdict(values, 983.0) == "marginal" and verdict(values, 982.99) == "fail"
    # 2 repeats of 8 requests: p99 interval [15, 16], its high end clipped to the maximum
    two_repeats = [float(v) for v in range(1, 9)] + [float(v) for v in range(9, 17)]
    assert verdict(two_repeats, 16.0) == "pass" and verdict(two_repeats, 15.99) == "marginal"
    assert verdict(two_repeats, 14.99) == "fail"


def test_quantile_interval_ranks_at_the_edges_of_the_sample():
    q = quantile_interval(list(range(1, 101)), 50.0)  # ranks floor(50 - 9.8) = 40 and ceil(59.8) + 1 = 61
    assert (q["low"], q["high"], q["clipped"]) == (40.0, 61.0, None)
    # n = 8, p50: the ranks fall exactly on the first and last values: not clipped
    assert quantile_interval([float(v) for v in range(8, 0, -1)], 50.0) == {
        "n": 8, "value": 4.5, "low": 1.0, "high": 8.0, "clipped": None}
    assert quantile_interval([1.0, 2.0, 3.0], 50.0)["clipped"] == "both"
    assert quantile_interval(list(range(1, 11)), 100.0) == {"n": 10, "value": 10.0, "low": 10.0, "high": 10.0,
                                                             "clipped": "high"}
    assert quantile_interval(list(range(1, 11)), 0.0) == {"n": 10, "value": 1.0, "low": 1.0, "high": 1.0,
                                                           "clipped": "low"}


def test_slo_verdict_entries_name_the_metric_its_interval_and_bound():
    slo = SLO(ttft_ms=990.0, tpot_ms=50.0, e2e_ms=5000.0)
    run = {"output_throughput": 1.0, "client_bound": False}
    ttft = [float(v) for v in range(1, 1001)]  # p99 interval [983, 998]: marginal at 990
    point = aggregate(1, [run], slo, 99.0, pooled={"ttft": ttft, "tpot": [10.0] * 20, "e2e_latency": [6000.0] * 20})
    marginal = {"metric": "p99_ttft_ms", "value": pytest.approx(990.01), "low": 983.0, "high": 998.0, "bound": 990.0,
                "clipped": None}
    failed = {"metric": "p99_e2e_latency_ms", "value": 6000.0, "low": 6000.0, "high": 6000.0, "bound": 5000.0,
              "clipped": "high"}
    assert point["slo"] == {"verdict": "fail", "passed": False, "failed": [failed], "marginal": [marginal]}
    bound = aggregate(1, [{**run, "client_bound": True}], slo, 99.0, pooled=point_pooled(ttft))["slo"]
    assert bound == {"verdict": "unknown", "passed": None, "why": "client-bound: not used", "failed": [],
                     "marginal": [marginal]}
    lost = aggregate(1, [{**run, "workers_lost": 1}], slo, 99.0, pooled=point_pooled(ttft))["slo"]
    assert lost == {"verdict": "fail", "passed": False, "marginal": [marginal],
                    "failed": [{"metric": "workers_lost", "value": 1, "low": 1, "high": 1, "bound": 0}]}
    missing = aggregate(1, [run], slo, 99.0)["slo"]  # rebuilt from runs without any percentile
    assert missing == {"verdict": "unknown", "passed": None, "failed": [], "marginal": [],
                       "why": "no value for p99_ttft_ms, p99_tpot_ms, p99_e2e_latency_ms"}
    passed = aggregate(1, [run], SLO(tpot_ms=50.0), 99.0, pooled={"tpot": [10.0] * 20})["slo"]
    assert passed == {"verdict": "pass", "passed": True, "failed": [], "marginal": []}
    rebuilt = aggregate(1, [{**run, "p99_tpot_ms": 10.0}], SLO(tpot_ms=50.0), 99.0)["slo"]
    assert rebuilt == passed  # from the runs' own p99, low = high = the mean of one repeat


def point_pooled(ttft: list[float]) -> dict:
    return {"ttft": ttft, "tpot": [10.0] * 20, "e2e_latency": [100.0] * 20}


def test_aggregate_counts_repeats_interruptions_and_judges_only_a_set_slo():
    runs = [{"output_throughput": 1.0}, {"output_throughput": 3.0, "interrupted": True}]
    point = aggregate(4, runs, SLO(), 99.0)
    assert (point["phase"], point["repeats"], point["interrupted"], point["slo"]) == ("sweep", 2, True, None)
    assert aggregate(4, runs[:1], SLO(), 99.0)["interrupted"] is False


def _sat(tput: float, ttft: float | None, e2e: float = 100.0) -> dict:
    run = {"output_throughput": tput, "median_e2e_latency_ms": e2e}
    if ttft is not None:
        run["median_ttft_ms"] = ttft
    return aggregate(1, [run], SLO(), 99.0)


def test_over_saturation_at_its_boundaries_and_its_reasons():
    prev = _sat(1000.0, 20.0)
    assert oversaturated(prev, _sat(1050.0, 40.0)) == {  # exactly 1.05x: not flat
        "stop": False, "reason": "output tok/s 1050.0 >= 1.05 x 1000.0; TTFT p50 40.0 ms > 1.5 x 20.0"}
    assert oversaturated(prev, _sat(1049.0, 30.0, 150.0)) == {  # exactly 1.5x: not grown
        "stop": False, "reason": "output tok/s 1049.0 < 1.05 x 1000.0; latency p50 did not grow past 1.5x"}
    assert oversaturated(prev, _sat(1049.0, 31.0, 151.0)) == {"stop": True, "reason": (
        "output tok/s 1049.0 < 1.05 x 1000.0; TTFT p50 31.0 ms > 1.5 x 20.0; E2E p50 151.0 ms > 1.5 x 100.0")}
    assert oversaturated(_sat(1000.0, None), _sat(900.0, None, 200.0))["stop"] is True  # no TTFT: E2E judges
    assert oversaturated({**prev, "client_bound": True}, prev) == {"stop": False,
                                                                    "reason": "not judged: a client-bound point"}
    assert oversaturated(_sat(0.0, 20.0), prev) == {"stop": False, "reason": "not judged: no output throughput"}


def _judged(value: float, verdict: str) -> dict:
    return {"value": value, "slo": {"verdict": verdict}}


def test_bracket_with_ties_and_without_passes():
    points = [_judged(2, "pass"), _judged(4, "pass"), _judged(4, "fail"), _judged(4, "marginal"), _judged(2, "marginal"),
              _judged(3, "unknown")]
    assert bracket(points) == {"highest_passing": 2, "lowest_failing": 4, "unknown": [3], "marginal": []}
    assert bracket([_judged(4, "fail"), _judged(2, "marginal")]) == {
        "highest_passing": None, "lowest_failing": 4, "unknown": [], "marginal": [2]}


def test_next_probe_stops_at_the_tolerance_inclusive():
    assert next_probe(1, 3, True, 0.0) == 2 and next_probe(1, 4, True, 0.0) == 2 and next_probe(1, 2, True, 0.0) is None
    assert next_probe(10.0, 15.0, False, 0.5) is None and next_probe(10.0, 15.5, False, 0.5) == 12.75
