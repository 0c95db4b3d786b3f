"""Inputs beside the prompt text (issue 32): embeddings batches and synthetic images.

Images are random pixels (numpy's generator seeded by the run's seed and the request's index, so
a run is reproducible), encoded by Pillow as PNG or JPEG and sent as base64 data URLs in chat
`image_url` parts, as vLLM's `random-mm` dataset and AIPerf's synthetic images do. Random pixels
barely compress, so the bytes sent are close to the worst case of a real image of that size.
"""

from __future__ import annotations

import base64
import io
from dataclasses import replace

import numpy as np

from loadgen.plan.texts import Prompt

MIME_TYPES = {"png": "image/png", "jpeg": "image/jpeg"}


def synthetic_image(seed: int, index: tuple[int, int], width: int, height: int, image_format: str) -> str:
    """One random-pixel image as a `data:image/...;base64,` URL; the same arguments give the same URL."""
    from PIL import Image

    rng = np.random.default_rng([seed, *index])
    pixels = rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)  # (H, W, RGB)
    out = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(out, format=image_format.upper())
    return f"data:{MIME_TYPES[image_format]};base64,{base64.b64encode(out.getvalue()).decode('ascii')}"


def request_images(cfg, index: int) -> tuple[str, ...]:
    """The `cfg.image_batch_size` images of request `index` (a warm-up request's index is negative)."""
    # NOTE: numpy seeds take no negative numbers: warm-up requests get a stream of their own.
    stream, first = (0, index) if index >= 0 else (1, -1 - index)
    return tuple(synthetic_image(cfg.seed, (stream, first * cfg.image_batch_size + k), cfg.image_width,
                                 cfg.image_height, cfg.image_format) for k in range(cfg.image_batch_size))


def batch_prompts(prompts: list[Prompt], batch_size: int) -> list[Prompt]:
    """Each `batch_size` consecutive prompts as one request's inputs (a tuple of texts; lengths summed).

    NOTE: the caller asks the dataset for batch_size x the requests, so no prompt is dropped."""
    if batch_size == 1:
        return prompts
    out = []
    for start in range(0, len(prompts) - batch_size + 1, batch_size):
        group = prompts[start:start + batch_size]
        out.append(replace(group[0], prompt=tuple(p.prompt for p in group),
                           input_len=sum(p.input_len for p in group),
                           is_exact_input_len=all(p.is_exact_input_len for p in group)))
    return out
