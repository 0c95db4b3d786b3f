"""H4 token storage: how a request's token ids are held and turned into batch tensors.

Two kits behind one small interface, chosen once at start-up (``--token-storage``): the legacy
``list`` kit holds ``list[int]`` and builds tensors element by element; the optimized ``array``
kit (sglang#25098) holds contiguous ``array('q')`` and builds tensors from buffer views.
Both append a decode token the same way: ``seq.append(tok)``.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from array import array
from collections.abc import Iterable, Sequence
from typing import ClassVar

import numpy as np
import torch

INT64_TYPECODE = "q"


class TokenStorage(ABC):
    """A kit that makes and combines token-id sequences of one type."""

    name: ClassVar[str]

    @abstractmethod
    def from_ids(self, ids: Iterable[int]):
        """A new sequence holding a request's prompt ids (never the caller's object)."""

    @abstractmethod
    def empty(self):
        """A new empty sequence, for output ids."""

    @abstractmethod
    def concat(self, a, b):
        """A new sequence ``a + b`` (fill ids = prompt + output; finish concat)."""

    @abstractmethod
    def to_tensor(self, parts: Sequence, device: str | torch.device = "cpu") -> torch.Tensor:
        """All parts, flattened in order, as one int64 tensor of shape (sum of lengths,)."""


class ListTokenStorage(TokenStorage):
    """Legacy: ``list[int]``; tensors built from one flat list, boxing every id."""

    name = "list"

    def from_ids(self, ids: Iterable[int]) -> list[int]:
        return list(ids)

    def empty(self) -> list[int]:
        return []

    def concat(self, a: list[int], b: list[int]) -> list[int]:
        return a + b

    def to_tensor(self, parts: Sequence[list[int]],
                  device: str | torch.device = "cpu") -> torch.Tensor:
        flat = list(itertools.chain.from_iterable(parts))
        return torch.tensor(flat, dtype=torch.int64).to(device, non_blocking=True)


class ArrayTokenStorage(TokenStorage):
    """Optimized: ``array('q')``; tensors built from zero-copy numpy views of the buffers."""

    name = "array"

    def from_ids(self, ids: Iterable[int]) -> array:
        return array(INT64_TYPECODE, ids)

    def empty(self) -> array:
        return array(INT64_TYPECODE)

    def concat(self, a: array, b: array) -> array:
        check_int64_array(a)
        check_int64_array(b)
        return a + b

    def to_tensor(self, parts: Sequence[array],
                  device: str | torch.device = "cpu") -> torch.Tensor:
        is_cuda = torch.device(device).type == "cuda"
        return flatten_arrays_to_int64_tensor(parts, device=device, pin_memory=is_cuda)


def check_int64_array(seq: object) -> None:
    """Raise TypeError unless ``seq`` is an ``array('q')`` (no conversion, no reinterpreting)."""
    if not isinstance(seq, array):
        raise TypeError(f"expected array('q') token ids, got {type(seq).__name__}; "
                        "convert with array('q', ids) where the ids enter the scheduler")
    if seq.typecode != INT64_TYPECODE:
        raise TypeError(f"expected array('q') token ids, got array({seq.typecode!r}); "
                        "arrays of another typecode are never reinterpreted")


def flatten_arrays_to_int64_tensor(parts: Sequence[array], device: str | torch.device = "cpu",
                                   pin_memory: bool = False) -> torch.Tensor:
    """Concatenate ``array('q')`` parts into one int64 tensor of shape (sum of lengths,).

    The result never shares memory with the parts: later appends to (or writes into) a part
    neither fail nor show through.
    """
    if not parts:
        return torch.empty(0, dtype=torch.int64, device=device)
    for part in parts:
        check_int64_array(part)
    # Buffer views skip boxing every id into a Python int (the whole point of H4).
    views = [np.frombuffer(part, dtype=np.int64) for part in parts]
    if len(views) > 1:
        flat = np.concatenate(views)
    elif pin_memory or torch.device(device).type != "cpu":
        flat = views[0]  # pinning or moving copies it
    else:
        # NOTE: the result would be the array's own buffer: it would see writes into the
        # array, and the array could not grow (BufferError) while the tensor lives.
        flat = views[0].copy()
    tensor = torch.from_numpy(flat)
    if pin_memory:
        tensor = tensor.pin_memory()
    return tensor.to(device, non_blocking=True)
