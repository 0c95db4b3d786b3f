"""`--csv`: one row per request, for spreadsheets and pandas."""

from __future__ import annotations

import csv

from loadgen.measure.metrics import itl_ms, origin_ns, output_tokens, reasoning_tokens, tpot_ms
from loadgen.measure.records import RequestRecord
from loadgen.plan.config import RunConfig
from loadgen.run.runner import RunResult

SERVER_COLUMNS = ("server_arrival_to_queue_ms", "server_queue_ms", "server_prefill_ms",
                  "server_prefill_steps", "server_first_output_ms", "server_decode_ms")
# issue 32: reasoning and tool calls (README "Reasoning and tool calls")
KIND_COLUMNS = ("ttfo_ms", "ttf_tool_call_ms", "reasoning_tokens", "num_tool_call_events")
COLUMNS = ("index", "worker", "ok", "error_class", "intended_s", "start_s", "end_s", "ttft_ms",
           "e2e_ms", "tpot_ms", "mean_itl_ms", "input_len", "output_tokens",
           "client_output_tokens", "num_empty_text_events", *SERVER_COLUMNS, *KIND_COLUMNS)


def csv_row(cfg: RunConfig, rec: RequestRecord, t0: int) -> dict:
    """One request's row: times in seconds from `t0`, latencies in ms from where the summary's start."""
    origin = origin_ns(cfg, rec)
    gaps = itl_ms(rec)
    row = {
        "index": rec.index, "worker": rec.worker, "ok": rec.ok, "error_class": rec.error_class,
        "intended_s": (rec.intended_ns - t0) / 1e9, "start_s": (rec.start_ns - t0) / 1e9,
        "end_s": (rec.end_ns - t0) / 1e9,
        "ttft_ms": None if rec.first_token_ns is None else (rec.first_token_ns - origin) / 1e6,
        "e2e_ms": (rec.end_ns - origin) / 1e6, "tpot_ms": tpot_ms(rec),
        "mean_itl_ms": float(gaps.mean()) if gaps.size else None,
        "input_len": rec.input_len, "output_tokens": output_tokens(rec),
        "client_output_tokens": rec.client_output_tokens, "num_empty_text_events": rec.num_empty_text_events,
    }
    row.update({name: getattr(rec, name) for name in SERVER_COLUMNS})
    row.update(_kind_cells(rec, origin))
    return row


def _kind_cells(rec: RequestRecord, origin: int) -> dict:
    since = lambda ns: None if ns is None else (ns - origin) / 1e6  # noqa: E731
    return {"ttfo_ms": since(rec.first_answer_ns), "ttf_tool_call_ms": since(rec.first_tool_call_ns),
            "reasoning_tokens": reasoning_tokens(rec), "num_tool_call_events": rec.num_tool_call_events}


def write_csv(path: str, result: RunResult) -> None:
    """Write every request as a CSV row (`COLUMNS`); empty cells where a value does not exist."""
    t0 = min((r.intended_ns for r in result.records), default=0)
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for rec in result.records:
            writer.writerow(csv_row(result.cfg, rec, t0))
