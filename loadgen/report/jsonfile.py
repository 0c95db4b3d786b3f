"""The one reader of saved JSON files (`loadgen report` and `compare`, `reportgen`): bounded before
memory or time can grow with a hostile file.

A path that is not a regular file (a FIFO, `/dev/zero`, a directory) is refused without reading or
waiting on it; so is a file past `max_bytes`, JSON nested past `max_depth` levels, `NaN` or
`Infinity` (not JSON, RFC 8259), a float that overflows and an integer past 2^63. Each refusal is a
`JsonFileError` (a ValueError) whose one-line message names the file. `read_json_values` also reads
JSON Lines (one value per line: SGLang's `--output-file`, `--append-result` files) and may let
`Infinity` stand for named top-level keys (SGLang writes its default request rate so).
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
    return _parse(read_bytes(path, max_bytes), path, max_depth, frozenset())


def read_json_values(path: str | os.PathLike, max_bytes: int = MAX_FILE_BYTES, max_depth: int = MAX_DEPTH,
                     infinity_keys: frozenset[str] = frozenset()) -> list:
    """The JSON values of the file at `path`: one for a JSON document, one per non-blank line for
    JSON Lines; each checked as `read_json` checks a file, except that `Infinity` may be the value of
    a top-level key named in `infinity_keys` (it is read as float inf)."""
    data = read_bytes(path, max_bytes)
    try:
        return [_parse(data, path, max_depth, infinity_keys)]
    except _ExtraData:
        lines = [(n, line) for n, line in enumerate(data.split(b"\n"), 1) if line.strip()]
        return [_parse(line, f"{path} line {n}", max_depth, infinity_keys) for n, line in lines]


class _ExtraData(JsonFileError):
    """A JSON value followed by more: maybe JSON Lines."""


def _parse(data: bytes, where, max_depth: int, infinity_keys: frozenset[str]):
    """One JSON value from `data`, checked; `where` names it in messages (a file, `file line 3`)."""
    infinities: list[str] = []
    constant = (lambda name: infinities.append(name) or _infinity(name)) if infinity_keys else _constant
    try:
        value = json.loads(data, parse_constant=constant, parse_float=_float, parse_int=_int)
    except RecursionError:
        raise _too_deep(where, max_depth) from None
    except json.JSONDecodeError as exc:
        kind = _ExtraData if exc.msg == "Extra data" else JsonFileError
        raise kind(f"cannot read {where}: not JSON: {exc}") from None
    except ValueError as exc:
        raise JsonFileError(f"cannot read {where}: not JSON: {exc}") from None
    if depth(value, max_depth) > max_depth:
        raise _too_deep(where, max_depth)
    allowed = sum(1 for k in infinity_keys if isinstance(value, dict) and value.get(k) == math.inf)
    if len(infinities) > allowed and (at := _infinity_at(value, infinity_keys)) is not None:
        raise JsonFileError(f"cannot read {where}: not JSON: Infinity at {at} is not a JSON number "
                            f"(RFC 8259; only a top-level {' or '.join(sorted(infinity_keys))} may be)")
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


def _infinity_at(value, allowed: frozenset[str]) -> str | None:
    """Where an Infinity (read as float inf) stands in `value`, other than as the value of an
    `allowed` top-level key; None when nowhere."""
    # NOTE: one iterator per open level, as in `depth`
    stack = [("", _items(value))]
    while stack:
        prefix, items = stack[-1]
        for key, item in items:
            if not prefix and key in allowed and item == math.inf:
                continue
            where = f"{prefix}[{key}]" if isinstance(key, int) else f"{prefix}.{key}" if prefix else key
            if isinstance(item, float) and math.isinf(item):
                return where
            if isinstance(item, dict | list):
                stack.append((where, _items(item)))
                break
        else:
            stack.pop()
    return None


def _items(value):
    return iter(value.items()) if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else iter(())


def _infinity(name: str) -> float:
    if name != "Infinity":
        _constant(name)
    return math.inf


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
