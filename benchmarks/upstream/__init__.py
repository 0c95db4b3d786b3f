"""Upstream sglang's own hot-path functions, measured on PyPI releases before and after each change.

Module map: `releases` (the cache: wheels, source trees, one venv), `stubs` (the CUDA-only
imports), `cases` (one case per hot path, driving upstream's function on the reference
workloads), `child` (one release in one process), `harness` (before/after per hot path),
`__main__` (the command line). See benchmarks/README.md, "Upstream releases".
"""
