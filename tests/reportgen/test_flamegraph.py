"""Flamegraph SVG, speedscope file and own/total time from collapsed stacks."""

from __future__ import annotations

import re
from collections import Counter

from reportgen.flamegraph import build_tree, function_times, render_svg, speedscope

STACKS = Counter({("main", "serve", "encode"): 6, ("main", "serve"): 2, ("main", "poll"): 2,
                  ("main", "f", "f"): 10})


def test_tree_counts_samples_under_each_frame():
    root = build_tree(STACKS)
    assert root.value == 20
    assert root.children["main"].children["serve"].value == 8
    assert root.children["main"].children["f"].children["f"].value == 10


def test_svg_has_one_rect_per_frame_sized_by_samples():
    svg = render_svg(STACKS, "t", width=1000, min_px=0)
    titles = re.findall(r"<title>([^<]*)</title>", svg)
    assert len(titles) == 7  # all, main, serve, encode, poll, f, f
    widths = dict(zip(titles, map(float, re.findall(r'<rect [^>]*width="([\d.]+)"', svg)), strict=True))
    assert widths["all — 20 samples (100.00%)"] == 1000.0
    assert widths["encode — 6 samples (30.00%)"] == 300.0
    assert svg.startswith('<svg class="flamegraph"')


def test_svg_prunes_narrow_frames():
    svg = render_svg(Counter({("a",): 1000, ("a", "tiny"): 1}), "t", width=1000, min_px=1.5)
    assert "tiny" not in svg


def test_speedscope_is_a_sampled_profile_with_shared_frames():
    doc = speedscope(Counter({("main (app.py)", "work (app.py)"): 3, ("main (app.py)",): 1}), "p")
    frames = doc["shared"]["frames"]
    assert frames[0] == {"name": "main", "file": "app.py"}
    profile = doc["profiles"][0]
    assert profile["type"] == "sampled" and profile["endValue"] == 4
    assert sorted(zip(map(tuple, profile["samples"]), profile["weights"], strict=True)) == [((0,), 1), ((0, 1), 3)]


def test_function_times_count_recursion_once():
    times, total = function_times(STACKS)
    assert total == 20
    assert (times["f"].own, times["f"].total) == (10, 10)
    assert (times["serve"].own, times["serve"].total) == (2, 8)
    assert times["main"].own == 0 and times["main"].total == 20
