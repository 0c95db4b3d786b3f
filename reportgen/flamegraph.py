"""From collapsed stacks: an SVG flamegraph, a speedscope profile, and own/total time per function."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from html import escape

Stacks = Counter  # Counter[tuple[str, ...]]: root-first stack -> samples

FRAME_HEIGHT = 16
PROJECT_MARKERS = ("reference_impl/", "loadgen/")


@dataclass
class Node:
    """One frame in the merged call tree; ``value`` counts the samples under it."""

    name: str
    value: int = 0
    children: dict[str, Node] = field(default_factory=dict)


def build_tree(stacks: Stacks) -> Node:
    """Merge the stacks into one call tree rooted at ``all``."""
    root = Node("all")
    for stack, count in stacks.items():
        node = root
        node.value += count
        for frame in stack:
            node = node.children.setdefault(frame, Node(frame))
            node.value += count
    return root


def _color(name: str) -> str:
    digest = int(hashlib.md5(name.encode()).hexdigest()[:6], 16)
    if any(marker in name for marker in PROJECT_MARKERS):
        return f"hsl({190 + digest % 40},{55 + digest % 20}%,{62 + digest % 12}%)"
    return f"hsl({10 + digest % 45},{75 + digest % 20}%,{58 + digest % 12}%)"


def _label(name: str, width: float) -> str:
    max_chars = int((width - 6) / 6.5)
    if max_chars < 4:
        return ""
    return name if len(name) <= max_chars else name[: max_chars - 2] + ".."


def _frames(node: Node, x: float, depth: int, scale: float, total: int, min_px: float, out: list[str]):
    width = node.value * scale
    if width < min_px:
        return 0
    y = depth * FRAME_HEIGHT
    title = f"{node.name} — {node.value} samples ({100 * node.value / total:.2f}%)"
    label = escape(_label(node.name, width))
    text = f'<text x="{x + 3:.1f}" y="{y + 12}">{label}</text>' if label else ""
    out.append(f'<g><title>{escape(title)}</title><rect x="{x:.1f}" y="{y}" width="{width:.1f}" '
               f'height="{FRAME_HEIGHT - 1}" fill="{_color(node.name)}"/>{text}</g>')
    max_depth = depth
    child_x = x
    for child in sorted(node.children.values(), key=lambda n: n.name):
        max_depth = max(max_depth, _frames(child, child_x, depth + 1, scale, total, min_px, out))
        child_x += child.value * scale
    return max_depth


def render_svg(stacks: Stacks, title: str, width: int = 1200, min_px: float = 1.5) -> str:
    """An icicle flamegraph (root on top): one ``<rect>`` and ``<title>`` per frame, width by samples.

    Frames narrower than ``min_px`` pixels are left out, which keeps the SVG small.
    """
    root = build_tree(stacks)
    total = max(root.value, 1)
    out: list[str] = []
    max_depth = _frames(root, 0.0, 1, width / total, total, min_px, out) if root.value else 1
    height = (max_depth + 1) * FRAME_HEIGHT + 4
    head = (f'<svg class="flamegraph" xmlns="http://www.w3.org/2000/svg" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" font-family="monospace" '
            f'font-size="11"><text x="2" y="12" font-weight="bold">{escape(title)} '
            f'({root.value} samples)</text>')
    return head + "".join(out) + "</svg>"


def speedscope(stacks: Stacks, name: str) -> dict:
    """A speedscope file (sampled profile, one sample entry per distinct stack, weight = samples)."""
    index: dict[str, int] = {}
    samples, weights = [], []
    for stack, count in stacks.items():
        samples.append([index.setdefault(frame, len(index)) for frame in stack])
        weights.append(count)
    frames = [_speedscope_frame(frame) for frame in index]
    return {"$schema": "https://www.speedscope.app/file-format-schema.json",
            "shared": {"frames": frames}, "name": name, "exporter": "reports (py-spy raw)",
            "activeProfileIndex": 0,
            "profiles": [{"type": "sampled", "name": name, "unit": "none", "startValue": 0,
                          "endValue": sum(weights), "samples": samples, "weights": weights}]}


def _speedscope_frame(frame: str) -> dict:
    func, sep, file = frame.rpartition(" (")
    if not sep:
        return {"name": frame}
    return {"name": func, "file": file.rstrip(")")}


@dataclass(frozen=True)
class FunctionTime:
    """Samples where a function was the leaf (own) and where it was anywhere on the stack (total)."""

    name: str
    own: int
    total: int


def function_times(stacks: Stacks) -> tuple[dict[str, FunctionTime], int]:
    """Own and total samples per function, and the number of samples."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for stack, count in stacks.items():
        if not stack:
            continue
        own[stack[-1]] += count
        for frame in set(stack):
            total[frame] += count
    times = {name: FunctionTime(name, own[name], total[name]) for name in total}
    return times, sum(stacks.values())
