"""Stand-ins for the two CUDA-only packages that upstream sglang imports at module level.

`torchvision` (PyPI's wheel is linked to CUDA torch; installing it replaces the CPU torch) is
imported by `sglang/srt/utils/common.py` (`torchvision.io.decode_jpeg`) and by the multimodal
configs; `sgl_kernel` is reached from the tokenizer manager through the host memory pool. None
of it runs in the hot paths measured here: every name they hand out is a placeholder that
raises when called. The stubs are served by an import hook (no files, no package metadata).
"""

import importlib.abc
import importlib.machinery
import sys
import types

STUBBED = ("torchvision", "sgl_kernel")


class _AbsentMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return cls


class Absent(metaclass=_AbsentMeta):
    """Any name taken from a stubbed package: usable in annotations and class bodies, not callable."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError("a stubbed CUDA-only package was called (benchmarks.upstream)")


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Absent


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] not in STUBBED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        return None


def install() -> None:
    """Serve `torchvision` and `sgl_kernel` (and their submodules) from stand-ins (idempotent)."""
    if not any(isinstance(finder, _StubFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _StubFinder())
