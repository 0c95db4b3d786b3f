"""The two H4 token-storage kits build identical tensors; the array kit refuses what it must."""

from __future__ import annotations

import random
from array import array

import pytest
import torch

from reference_impl.hot_paths import HOT_PATHS
from reference_impl.scheduler.token_storage import (
    ArrayTokenStorage,
    ListTokenStorage,
    TokenStorage,
    flatten_arrays_to_int64_tensor,
)

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)


def _random_parts(rng: random.Random) -> list[list[int]]:
    """Between 0 and 6 parts, some empty, with ids anywhere in the int64 range."""
    parts = []
    for _ in range(rng.randrange(7)):
        length = rng.choice([0, 1, 2, rng.randrange(3, 300)])
        parts.append([rng.randint(INT64_MIN, INT64_MAX) for _ in range(length)])
    return parts


def _tensor(storage: TokenStorage, parts: list[list[int]]) -> torch.Tensor:
    return storage.to_tensor([storage.from_ids(p) for p in parts])


def _expected(parts: list[list[int]]) -> list[int]:
    return [tok for part in parts for tok in part]


@pytest.mark.parametrize("seed", range(40))
def test_both_kits_build_identical_tensors(seed: int):
    parts = _random_parts(random.Random(seed))
    from_list = _tensor(ListTokenStorage(), parts)
    from_array = _tensor(ArrayTokenStorage(), parts)
    for tensor in (from_list, from_array):
        assert tensor.dtype == torch.int64 and tensor.dim() == 1
        assert tensor.device.type == "cpu"
        assert tensor.tolist() == _expected(parts)
    assert torch.equal(from_list, from_array)


@pytest.mark.parametrize("parts", [[], [[]], [[], []], [[5], []], [[], [7, 8]]],
                         ids=["no_parts", "one_empty", "two_empty", "empty_last", "empty_first"])
@pytest.mark.parametrize("name", HOT_PATHS["H4"].choices)
def test_empty_edges(name: str, parts: list[list[int]]):
    tensor = _tensor(HOT_PATHS["H4"].create(name), parts)
    assert tensor.dtype == torch.int64 and tensor.shape == (len(_expected(parts)),)
    assert tensor.tolist() == _expected(parts)


def test_flatten_of_no_parts_is_empty_int64():
    tensor = flatten_arrays_to_int64_tensor([])
    assert tensor.dtype == torch.int64 and tensor.shape == (0,)


@pytest.mark.parametrize("name", HOT_PATHS["H4"].choices)
def test_kit_lifecycle(name: str):
    storage = HOT_PATHS["H4"].create(name)
    assert storage.name == name
    prompt_ids = [3, 1, 4, 1, 5]
    prompt = storage.from_ids(prompt_ids)
    prompt_ids.append(9)
    output = storage.empty()
    for tok in (2, 6):
        output.append(tok)
    fill = storage.concat(prompt, output)
    output.append(5)
    assert list(prompt) == [3, 1, 4, 1, 5]
    assert list(fill) == [3, 1, 4, 1, 5, 2, 6]
    assert type(prompt) is type(output) is type(fill)
    assert storage.to_tensor([fill, output]).tolist() == [3, 1, 4, 1, 5, 2, 6, 2, 6, 5]


def test_kit_types():
    assert type(HOT_PATHS["H4"].create("list").empty()) is list
    seq = HOT_PATHS["H4"].create("array").from_ids(range(3))
    assert isinstance(seq, array) and seq.typecode == "q"


def test_unknown_kit_is_refused():
    with pytest.raises(ValueError, match="unknown form .tuple.; choose from list, array"):
        HOT_PATHS["H4"].create("tuple")


@pytest.mark.parametrize("bad", [[1, 2, 3], (1, 2), array("l", [1, 2]), array("i", [1, 2]),
                                 array("d", [1.0])],
                         ids=["list", "tuple", "array_l", "array_i", "array_d"])
def test_flatten_refuses_non_int64_arrays(bad):
    good = array("q", [1])
    for parts in ([bad], [good, bad], [bad, good]):
        with pytest.raises(TypeError, match=r"expected array\('q'\)"):
            flatten_arrays_to_int64_tensor(parts)


def test_array_kit_refuses_a_plain_list():
    storage = ArrayTokenStorage()
    with pytest.raises(TypeError, match="got list"):
        storage.to_tensor([[1, 2, 3]])
    with pytest.raises(TypeError, match="got list"):
        storage.concat(storage.from_ids([1]), [2])


def test_array_kit_refuses_another_typecode():
    storage = ArrayTokenStorage()
    # 'l' has the same item size on 64-bit Linux: still refused, never reinterpreted.
    with pytest.raises(TypeError, match=r"got array\('l'\)"):
        storage.to_tensor([array("l", [1, 2])])
    with pytest.raises(TypeError, match=r"got array\('i'\)"):
        storage.concat(array("i", [1]), storage.from_ids([2]))


@pytest.mark.parametrize("num_parts", [1, 2])
def test_tensor_does_not_alias_its_arrays(num_parts: int):
    parts = [array("q", [10, 20, 30]) for _ in range(num_parts)]
    tensor = flatten_arrays_to_int64_tensor(parts)
    expected = [10, 20, 30] * num_parts
    for part in parts:
        part.append(40)  # would raise BufferError if the tensor held the array's buffer
        part[0] = -1
        part.extend(range(10_000))  # forces a reallocation
    assert tensor.tolist() == expected
    tensor[0] = 99
    assert parts[0][0] == -1


@pytest.mark.parametrize("name", HOT_PATHS["H4"].choices)
def test_kit_tensor_does_not_alias_a_single_sequence(name: str):
    storage = HOT_PATHS["H4"].create(name)
    seq = storage.from_ids([1, 2, 3])
    tensor = storage.to_tensor([seq])
    seq.append(4)
    seq[0] = 0
    assert tensor.tolist() == [1, 2, 3]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", HOT_PATHS["H4"].choices)
def test_to_tensor_on_cuda(name: str):
    storage = HOT_PATHS["H4"].create(name)
    parts = _random_parts(random.Random(7)) + [[1, 2, 3], []]
    seqs = [storage.from_ids(p) for p in parts]
    tensor = storage.to_tensor(seqs, device="cuda")
    for seq in seqs:
        seq.append(0)
    assert tensor.device.type == "cuda" and tensor.dtype == torch.int64
    assert tensor.cpu().tolist() == _expected(parts)
    single = storage.to_tensor(seqs[-2:-1], device=torch.device("cuda"))
    assert single.cpu().tolist() == [1, 2, 3, 0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("pin_memory", [False, True])
def test_flatten_on_cuda(pin_memory: bool):
    parts = [array("q", range(1000)), array("q"), array("q", [7])]
    tensor = flatten_arrays_to_int64_tensor(parts, device="cuda", pin_memory=pin_memory)
    torch.cuda.synchronize()
    assert tensor.device.type == "cuda"
    assert tensor.cpu().tolist() == list(range(1000)) + [7]
    assert flatten_arrays_to_int64_tensor([], device="cuda").device.type == "cuda"
