"""The one reader of saved JSON files (`loadgen report` and `compare`, `reportgen`): bounded before
memory or time can grow with a hostile file.

A path that is not a regular file (a FIFO, `/dev/zero`, a directory) is refused without reading or
waiting on it; so is a file past `max_bytes`, JSON nested past `max_depth` levels, `NaN` or
`Infinity` (not JSON, RFC 8259), a float that overflows and an integer past 2^63. Each refusal is a
`JsonFileError` (a ValueError) whose one-line message names the file.
"""

from __future__ import annotations

import json
import math
import os
import stat

MAX_FILE_BYTES = 64 * 2**20
MAX_DEPTH = 64
MAX_INT = 2**63
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class JsonFileError(ValueError):
    """A saved file that cannot be read or is refused; the message names it."""


def read_bytes(path: str | os.PathLike, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most `max_bytes` (JsonFileError otherwise)."""
    # NOTE: opened non-blocking, so a FIFO with no writer is refused at once instead of waited on;
    # the read stops one byte past the bound, so a file that grows while read is refused as well.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise JsonFileError(f"cannot read {path}: {exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a regular file")
            raise JsonFileError(f"cannot read {path}: it is {kind}, not a regular file")
        if info.st_size > max_bytes:
            raise _too_large(path, max_bytes)
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(max_bytes + 1)
    except OSError as exc:
        raise JsonFileError(f"cannot read {path}: {exc}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise _too_large(path, max_bytes)
    return data


def read_json(path: str | os.PathLike, max_bytes: int = MAX_FILE_BYTES, max_depth: int = MAX_DEPTH):
    """The JSON value of the file at `path`, read with `read_bytes` and checked as the module says."""
    data = read_bytes(path, max_bytes)
    try:
        value = json.loads(data, parse_constant=_constant, parse_float=_float, parse_int=_int)
    except RecursionError:
        raise _too_deep(path, max_depth) from None
    except ValueError as exc:
        raise JsonFileError(f"cannot read {path}: not JSON: {exc}") from None
    if depth(value, max_depth) > max_depth:
        raise _too_deep(path, max_depth)
    return value


def depth(value, limit: int = MAX_DEPTH) -> int:
    """How deeply `value` nests lists and objects (a scalar: 0), counted up to `limit` + 1."""
    # NOTE: one iterator per open level, so the walk holds O(depth), not O(size), however many
    # containers the file has
    if not isinstance(value, dict | list):
        return 0
    deepest, stack = 1, [iter(_children(value))]
    while stack and deepest <= limit:
        for child in stack[-1]:
            if isinstance(child, dict | list):
                stack.append(iter(_children(child)))
                deepest = max(deepest, len(stack))
                break
        else:
            stack.pop()
    return deepest


def _children(container: dict | list):
    return container.values() if isinstance(container, dict) else container


def _too_large(path, max_bytes: int) -> JsonFileError:
    return JsonFileError(f"cannot read {path}: larger than {max_bytes:,} bytes (the bound for this file)")


def _too_deep(path, max_depth: int) -> JsonFileError:
    return JsonFileError(f"cannot read {path}: JSON nested deeper than {max_depth} levels")


def _constant(name: str):
    raise ValueError(f"{name} is not a JSON number (RFC 8259)")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def _int(text: str) -> int:
    value = int(text)
    if abs(value) > MAX_INT:
        raise ValueError(f"integer {text[:40]}... is out of range (past 2^63)")
    return value
